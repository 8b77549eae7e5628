"""Runs inside .venv-vllm (spawned by test_vllm_training.py): a short CTPO run of SmolLM2-135M-Instruct with
``rollout.sampler: vllm`` (the CPU build), then `toolgym export` of its final checkpoint loaded by a fresh
vLLM engine and by transformers. Arguments: OUT_DIR full|lora STEPS. Prints one ``RESULT {json}`` line with
what the test checks (and the seconds each phase took)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.signal_env import register_signal_arith  # noqa: E402


def logprobs_of(model, ids: list[int], start: int):
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    lp = torch.log_softmax(logits, -1)
    return [float(lp[i - 1, ids[i]]) for i in range(start, len(ids))]


def main() -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from toolgym._cli.export import export_checkpoint
    from toolgym.agents.sampling import SamplingParams
    from toolgym.agents.vllm_sampler import VLLMSampler
    from toolgym.assets import asset_path
    from toolgym.training.config import load_config
    from toolgym.training.outputs.logging import read_metrics
    from toolgym.training.trainer import train

    out = Path(sys.argv[1])
    lora = sys.argv[2] == "lora"
    steps = int(sys.argv[3])
    base = str(asset_path("smollm2-135m-instruct"))
    overrides = {
        "algorithm": "ctpo", "seed": 3, "output_dir": str(out), "steps": steps, "mini_batches": 2,
        "model": {"name_or_path": "smollm2-135m-instruct", "device": "cpu"},
        "rollout": {"env": register_signal_arith(), "env_kwargs": {"min_digits": 1, "max_digits": 2, "terms": 2, "ops": "+"},
                    "group_size": 2, "prompts_per_step": 2, "max_turns": 2, "max_new_tokens": 24,
                    "max_response_tokens": 128, "temperature": 0.8, "sampler": "vllm", "sandbox": "auto",
                    "sandbox_pool": 1,
                    "sampler_kwargs": {"max_model_len": 1024, "max_num_seqs": 8, "max_num_batched_tokens": 1024}},
        "optimizer": {"lr": 1.0e-3 if lora else 2.0e-5, "grad_clip": 1.0, "warmup_steps": 0},
        "eval": {"every": 0, "tasks": 2, "temperature": 0.8, "at_start": True},
        "checkpoint": {"every": 0, "keep_last": 1},
        "logging": {"tensorboard": False, "plot": False, "progress": False},
    }
    if lora:
        overrides["model"]["lora"] = {"r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]}
    t0 = time.monotonic()
    summary = train(load_config(overrides), console=False)
    t1 = time.monotonic()
    rows = read_metrics(out, "train")
    report = {"summary_steps": summary["steps"], "train": [
        {k: r.get(k) for k in ("step", "behaviour_gap_mean", "behaviour_gap_max", "weight_pushes", "loss",
                                "reward_mean", "grad_norm", "episodes", "errors", "adv_zero_groups")} for r in rows],
        "evals": [r.get("reward_mean") for r in read_metrics(out, "eval")]}

    exported = out / "exported"
    export_checkpoint(out, exported)
    trained = AutoModelForCausalLM.from_pretrained(exported, dtype=torch.float32).eval()
    initial = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    engine = VLLMSampler(str(exported), max_model_len=512, enforce_eager=True, dtype="float32", max_num_seqs=4,
                         max_num_batched_tokens=512, seed=0)
    tok = engine.llm.get_tokenizer()
    text = tok.apply_chat_template([{"role": "user", "content": "What is 12 + 7? Answer with a number."}],
                                   add_generation_prompt=True, tokenize=False)
    prompt = tok.encode(text, add_special_tokens=False)
    (sample,) = engine.generate([prompt], SamplingParams(temperature=1.0, max_tokens=16, seed=1))[0]
    ids = prompt + sample.token_ids
    hf_trained = logprobs_of(trained, ids, len(prompt))
    hf_initial = logprobs_of(initial, ids, len(prompt))
    report["export"] = {
        "tokens": len(sample.token_ids),
        "vllm_vs_transformers_max": max(abs(a - b) for a, b in zip(sample.logprobs, hf_trained, strict=True)),
        "trained_vs_initial_mean": sum(abs(a - b) for a, b in zip(hf_trained, hf_initial, strict=True)) / len(ids[len(prompt):]),
    }
    engine.close()
    report["seconds"] = {"train": round(t1 - t0, 1), "export_check": round(time.monotonic() - t1, 1)}
    print("RESULT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
