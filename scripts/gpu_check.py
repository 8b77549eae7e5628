"""The prepared GPU check behind scripts/gpu_check.sh: training steps, the TRL and verl losses, on one GPU.

CI has no GPU; the device_standin tests prove the GPU path's device rules on a CPU stand-in. This script is the
part that needs the real thing: bf16 kernels, CUDA memory, throughput. It needs no network: the model is the
Qwen2.5-Coder-0.5B-Instruct asset where one is found locally (TOOLGYM_HOME, or ``--model DIR``), else a model it
builds with that architecture (24 layers, hidden 896, 151,936-token vocabulary, tied head) and random weights,
with a tokenizer trained on the fly; the report says which. Tasks are Arith's (generated, no sandbox).

Prints one block per part and writes everything as JSON to ``--out``. ``--device cpu --tiny`` runs the same
parts on a small model on the CPU (what tests/test_gpu_check.py runs in CI so that this script does not rot).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.signal_env import register_signal_arith, sample_fingerprint  # noqa: E402

QWEN_05B = {"hidden": 896, "intermediate": 4864, "layers": 24, "heads": 14, "kv_heads": 2, "vocab": 151_936}
TINY = {"hidden": 64, "intermediate": 128, "layers": 2, "heads": 4, "kv_heads": 2, "vocab": 512}
ARITH = {"min_digits": 1, "max_digits": 2, "system_prompt": None, "max_turns": 1, "parser": "none"}


def say(text: str) -> None:
    print(text, flush=True)


def find_or_build_model(work: Path, given: str | None, tiny: bool) -> tuple[Path, str]:
    """(model folder, what it is): a given folder, the local Qwen asset, or a random-weight model of its shape."""
    if given:
        return Path(given), f"given folder {given}"
    if not tiny:
        home = Path(os.environ.get("TOOLGYM_HOME", Path.home() / ".cache" / "toolgym"))
        asset = home / "qwen2.5-coder-0.5b-instruct"
        if (asset / "config.json").exists():
            return asset, f"Qwen2.5-Coder-0.5B-Instruct asset at {asset}"
    shape = TINY if tiny else QWEN_05B
    out = work / ("tiny-model" if tiny else "qwen2-0.5b-shape-random")
    if not (out / "config.json").exists():
        import torch
        from transformers import Qwen2Config, Qwen2ForCausalLM

        from toolgym.training.demo_model import train_tokenizer

        corpus = [f"What is {a} + {b}? Answer: {a + b}" for a in range(40) for b in range(40)]
        tok = train_tokenizer(corpus * 2, vocab_size=384)
        torch.manual_seed(0)
        cfg = Qwen2Config(vocab_size=shape["vocab"], hidden_size=shape["hidden"],
                          intermediate_size=shape["intermediate"], num_hidden_layers=shape["layers"],
                          num_attention_heads=shape["heads"], num_key_value_heads=shape["kv_heads"],
                          max_position_embeddings=4096, tie_word_embeddings=True,
                          bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        Qwen2ForCausalLM(cfg).save_pretrained(out)
        tok.save_pretrained(out)
    what = "tiny Qwen2" if tiny else "Qwen2.5-0.5B architecture with random weights (no local asset found)"
    return out, what


def run_config(work: Path, name: str, model: Path, device: str, *, algorithm: str, lora: bool, steps: int,
               tiny: bool, **over: Any) -> dict[str, Any]:
    """A toolgym training config: Arith without tools (no sandbox on a GPU box) with a reward term that tells any
    two episodes apart (a random-weight model solves nothing, and all-zero advantages would train nothing), the HF
    sampler, bf16 on CUDA."""
    cfg: dict[str, Any] = {
        "algorithm": algorithm, "seed": 0, "output_dir": str(work / name), "steps": steps,
        "model": {"name_or_path": str(model), "device": device, "dtype": "bf16" if device == "cuda" else "fp32"},
        "rollout": {"env": register_signal_arith(), "env_kwargs": ARITH, "group_size": 4 if tiny else 8,
                    "prompts_per_step": 2 if tiny else 8, "max_turns": 1, "max_new_tokens": 8 if tiny else 128,
                    "max_response_tokens": 8 if tiny else 128, "temperature": 1.0, "sandbox": None},
        "optimizer": {"lr": 1e-5 if not lora else 1e-4},
        "sft": {"enabled": False},
        "eval": {"every": 0, "tasks": 1, "at_start": False},
        "checkpoint": {"every": 0, "keep_last": 1},
        "logging": {"progress": False, "plot": False},
    }
    if algorithm == "ctpo":
        cfg["mini_batches"] = 2
    if lora:
        cfg["model"]["lora"] = {"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": ["q_proj", "v_proj"]}
    cfg.update(over)
    return cfg


def cuda_peak_gb() -> float | None:
    import torch

    return torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None


def train_part(work: Path, model: Path, device: str, tiny: bool) -> dict[str, Any]:
    """5 CTPO and 2 MOPD steps, full fine-tune and LoRA: tokens/s, seconds per step, peak memory, losses."""
    import torch

    from toolgym.training.config import load_config
    from toolgym.training.logging import read_metrics
    from toolgym.training.trainer import Trainer

    out: dict[str, Any] = {}
    for algorithm, steps in (("ctpo", 5), ("mopd", 2)):
        for lora in (False, True):
            name = f"{algorithm}-{'lora' if lora else 'full'}"
            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()
            t0 = time.perf_counter()
            Trainer(load_config(run_config(work, name, model, device, algorithm=algorithm, lora=lora, steps=steps,
                                           tiny=tiny)), console=False).fit()
            rows = [r for r in read_metrics(work / name) if r["kind"] == "train"]
            res = {"steps": len(rows), "wall_s": round(time.perf_counter() - t0, 1),
                   "loss": [r.get("loss") for r in rows], "reward": [r.get("reward_mean") for r in rows],
                   "tokens_per_s_update": [round(r.get("tokens_per_s", 0.0), 1) for r in rows],
                   "step_s": [round(r.get("step_s", 0.0), 2) for r in rows],
                   "peak_memory_gb_logged": [r.get("peak_memory_gb") for r in rows],
                   "cuda_max_allocated_gb": cuda_peak_gb()}
            out[name] = res
            say(f"  {name:10s} steps {res['steps']}  wall {res['wall_s']} s  step s {res['step_s']}  "
                f"update tok/s {res['tokens_per_s_update']}  CUDA peak {res['cuda_max_allocated_gb']} GB  "
                f"loss {[round(x, 5) if isinstance(x, float) else x for x in res['loss']]}")
    return out


def _handmade_groups(tokenizer: Any, template: Any, n_groups: int, size: int, length: int) -> list[list[Any]]:
    import torch

    from toolgym.agents.trajectory import Trajectory

    g = torch.Generator().manual_seed(0)
    vocab = len(tokenizer)
    groups = []
    for gi in range(n_groups):
        msgs = [{"role": "user", "content": f"What is {gi} + 1?"}]
        prompt = template.prompt_ids(msgs)
        row = []
        for k in range(size):
            resp = torch.randint(3, vocab, (length,), generator=g).tolist()
            row.append(Trajectory(task_id=f"t{gi}", group_id=f"g{gi}", prompt_ids=prompt, response_ids=resp,
                                  loss_mask=[1] * length, behavior_logprobs=[-1.0] * length, reward=float(k % 2),
                                  turns=msgs + [{"role": "assistant", "content": "x"}]))
        groups.append(row)
    return groups


def loss_values_part(work: Path, model: Path, device: str, tiny: bool) -> dict[str, Any]:
    """One micro-batch's loss on the same weights and batch, on the CPU in fp32 and on the device in fp32 and bf16:
    the CUDA values against the CPU ones. CTPO's old log-probs of one row are moved by 0.05 nats per token, so
    its ratio and clip take part."""
    from toolgym.training.config import load_config
    from toolgym.training.trainer import Trainer

    out: dict[str, Any] = {}
    places = [("cpu", "fp32")] + ([(device, "fp32"), (device, "bf16")] if device != "cpu" else [])
    for algorithm in ("ctpo", "mopd"):
        for dev, dtype in places:
            cfg = run_config(work, f"loss-{algorithm}-{dev}-{dtype}", model, dev, algorithm=algorithm, lora=False,
                             steps=1, tiny=tiny)
            cfg["model"]["dtype"] = dtype
            cfg["mini_batches"] = 2 if algorithm == "ctpo" else 1
            tr = Trainer(load_config(cfg), console=False)
            tr.build()
            obj = tr.objective
            groups = _handmade_groups(tr.tokenizer, tr.template, 2, 2, 8 if tiny else 96)
            batch, _ = obj.prepare(tr.ctx, groups)
            batch.old_logp[0] = batch.old_logp[0] - 0.05
            tr.train_mode()
            with tr.autocast():
                loss, m = obj.loss(tr.ctx, batch, [0, 1], float(8 * 2 if tiny else 96 * 2), 2.0)
            out[f"{algorithm} {dev} {dtype}"] = float(loss.detach())
    for algorithm in ("ctpo", "mopd"):
        ref = out[f"{algorithm} cpu fp32"]
        line = "  ".join(f"{k.split(' ', 1)[1]} {v:+.6e}" for k, v in out.items() if k.startswith(algorithm))
        say(f"  {algorithm}: {line}  (|device fp32 - cpu| = "
            f"{abs(out.get(f'{algorithm} {device} fp32', ref) - ref):.2e})")
    return out


def trl_part(work: Path, model: Path, device: str, tiny: bool) -> dict[str, Any]:
    """Two steps of ToolgymGRPOTrainer (CTPO, num_iterations=2 so the second pass is off-policy)."""
    from trl import GRPOConfig

    from toolgym.integrations.trl import ToolgymGRPOTrainer, env_dataset, env_reward

    args = GRPOConfig(output_dir=str(work / "trl"), per_device_train_batch_size=4 if tiny else 8,
                      num_generations=4 if tiny else 8, max_completion_length=8 if tiny else 64, max_steps=2,
                      num_iterations=2, learning_rate=1e-5, logging_steps=1, report_to=[], save_strategy="no",
                      seed=0, bf16=device == "cuda", use_cpu=device == "cpu", gradient_checkpointing=False)
    t0 = time.perf_counter()
    def fingerprint(completions: list[Any], **_: Any) -> list[float]:  # reward spread for a random-weight model
        return [sample_fingerprint([{"role": "assistant", "content": str(c)}]) for c in completions]

    tr = ToolgymGRPOTrainer(str(model), algorithm="ctpo", args=args,
                            reward_funcs=[env_reward("toolgym/Arith-v0", **ARITH), fingerprint],
                            train_dataset=env_dataset("toolgym/Arith-v0", 16, **ARITH))
    tr.train()
    logs = [h for h in tr.state.log_history if "loss" in h]
    res = {"steps": tr.state.global_step, "wall_s": round(time.perf_counter() - t0, 1),
           "loss": [h["loss"] for h in logs], "clip_frac": [h.get("toolgym/clip_frac") for h in logs],
           "cuda_max_allocated_gb": cuda_peak_gb()}
    say(f"  steps {res['steps']}  wall {res['wall_s']} s  loss {res['loss']}  toolgym/clip_frac {res['clip_frac']}")
    return res


def vllm_part(work: Path, model: Path, device: str, tiny: bool) -> dict[str, Any]:
    """Two CTPO steps with rollouts from an in-process vLLM engine that sleeps through each update and takes the
    new weights after it (only where vLLM is installed)."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        say("  vLLM is not installed here: this part is skipped")
        return {"skipped": "vLLM is not installed"}
    from toolgym.training.config import load_config
    from toolgym.training.logging import read_metrics
    from toolgym.training.trainer import Trainer

    cfg = run_config(work, "ctpo-vllm", model, device, algorithm="ctpo", lora=False, steps=2, tiny=tiny)
    cfg["rollout"]["sampler"] = "vllm"
    t0 = time.perf_counter()
    Trainer(load_config(cfg), console=False).fit()
    rows = [r for r in read_metrics(work / "ctpo-vllm") if r["kind"] == "train"]
    res = {"steps": len(rows), "wall_s": round(time.perf_counter() - t0, 1),
           "behaviour_gap_max": [r.get("behaviour_gap_max") for r in rows], "weight_pushes": rows[-1].get("weight_pushes")}
    say(f"  {json.dumps(res)}")
    return res


def verl_part(device: str) -> dict[str, Any]:
    """verl's registry call of the ctpo loss with the batch on the device, against the same call on the CPU."""
    import torch
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.workers.config import ActorConfig, PolicyLossConfig

    import toolgym.integrations.verl  # noqa: F401  (registers the losses)

    g = torch.Generator().manual_seed(0)
    lengths = [64, 40, 64, 8, 50, 0, 64, 30]
    b, t = len(lengths), 64
    mask = torch.arange(t) < torch.tensor(lengths)[:, None]
    logp = -(torch.rand(b, t, generator=g) * 3 + 0.05)
    old = logp + 0.1 * torch.randn(b, t, generator=g)
    adv = torch.randn(b, generator=g)[:, None] * mask
    cfg = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=2,
                      policy_loss=PolicyLossConfig(loss_mode="ctpo"))
    cfg.global_batch_info.update({"dp_size": 2, "batch_num_tokens": 640, "global_batch_size": 16})
    out = {}
    for dev in ("cpu", device):
        x = logp.clone().to(dev).requires_grad_(True)
        loss, m = get_policy_loss_fn("ctpo")(old_log_prob=old.to(dev), log_prob=x, advantages=adv.to(dev),
                                              response_mask=mask.to(dev), loss_agg_mode="token-mean", config=cfg,
                                              rollout_is_weights=None)
        loss.backward()
        out[dev] = {"loss": float(loss.detach()), "grad_abs_sum": float(x.grad.abs().sum()),
                    "clipfrac": m["actor/pg_clipfrac"]}
    say(f"  {json.dumps(out)}")
    return out


def part(name: str, fn: Callable[[], Any], report: dict[str, Any]) -> None:
    say(f"== {name}")
    t0 = time.perf_counter()
    try:
        report[name] = fn()
    except ImportError as exc:
        report[name] = {"skipped": f"{type(exc).__name__}: {exc}"}
        say(f"  skipped: {exc} (carry the wheels: scripts/gpu_wheels.sh)")
    except Exception as exc:  # one part failing must not hide the others' output
        report[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=8)}
        say(f"  FAILED: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=8)}")
    say(f"   ({time.perf_counter() - t0:.1f} s)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tiny", action="store_true", help="a small model (the CPU smoke form)")
    ap.add_argument("--model", default=None, help="a model folder to use instead of the asset or the built model")
    ap.add_argument("--work", default="/tmp/toolgym-gpu-check")
    ap.add_argument("--out", default=None, help="write the report as JSON here")
    ap.add_argument("--parts", default="train,loss,trl,verl,vllm")
    a = ap.parse_args()
    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        say("gpu_check: no CUDA device visible (torch.cuda.is_available() is False); use --device cpu --tiny for the "
            "CPU form")
        return 2
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"torch": torch.__version__, "device": a.device,
                              "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    model, what = find_or_build_model(work, a.model, a.tiny)
    report["model"] = what
    say(f"gpu_check: torch {torch.__version__}, device {a.device} {report['gpu'] or ''}; model: {what}")
    wanted = set(a.parts.split(","))
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("train", lambda: train_part(work, model, a.device, a.tiny)),
        ("loss", lambda: loss_values_part(work, model, a.device, a.tiny)),
        ("trl", lambda: trl_part(work, model, a.device, a.tiny)),
        ("verl", lambda: verl_part(a.device)),
        ("vllm", lambda: vllm_part(work, model, a.device, a.tiny)),
    ]
    for name, fn in steps:
        if name in wanted:
            part(name, fn, report)
    if a.out:
        Path(a.out).write_text(json.dumps(report, indent=2, default=str))
    failed = [k for k, v in report.items() if isinstance(v, dict) and "error" in v]
    say(f"gpu_check: {'FAILED parts: ' + ', '.join(failed) if failed else 'all parts ran'}")
    return 1 if failed else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
