"""Runs inside .venv-vllm in a private mount namespace (spawned by test_vllm_push.py, as root there): weight pushes
to the real vLLM CPU engine. Prints one ``RESULT {json}`` line with what the test checks.

1. A tiny Llama with tied embeddings: pushes through a tmpfs too small for them (the push falls back to disk)
   and through one with room, each after all weights moved; the engine's log-probs against transformers'.
2. A tiny Mixtral (mixture of experts): the push against vLLM's own reload of the ``save_pretrained``
   checkpoint of the same weights.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

IDS = [3, 17, 5, 40, 9, 22, 61, 8, 30, 12]
ENGINE = {"max_model_len": 128, "enforce_eager": True, "dtype": "float32", "max_num_seqs": 4,
          "max_num_batched_tokens": 256, "skip_tokenizer_init": True}


def mount_tmpfs(folder: Path, size: str) -> None:
    folder.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=True)


def engine_logprobs(engine: Any) -> list[float]:
    """The engine's log-probs of IDS (prompt log-probs: no sampling involved)."""
    import vllm
    from vllm.inputs import TokensPrompt

    sp = vllm.SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0, detokenize=False)
    (res,) = engine.llm.generate([TokensPrompt(prompt_token_ids=IDS)], sp, use_tqdm=False)
    return [float(step[t].logprob) for step, t in zip(res.prompt_logprobs[1:], IDS[1:], strict=True)]


def model_logprobs(model: Any) -> list[float]:
    import torch

    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([IDS])).logits[0].float(), -1)
    return [float(lp[i - 1, IDS[i]]) for i in range(1, len(IDS))]


def gap(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def move(model: Any, names: tuple[str, ...] = ()) -> None:
    """'Training': every weight (or those whose name contains one of ``names``) moves."""
    import torch

    with torch.no_grad():
        for name, p in model.named_parameters():
            if not names or any(n in name for n in names):
                p.add_(0.5 * torch.randn_like(p))


def transport(work: Path, report: dict) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    from toolgym.agents.vllm_sampler import VLLMSampler
    from toolgym.training.sampling.policy_sync import PolicySync

    tiny, roomy = work / "tiny-shm", work / "roomy-shm"
    mount_tmpfs(tiny, "128k")  # the model below is ~0.25 MB in float32
    mount_tmpfs(roomy, "8m")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=2, head_dim=32,
                                         max_position_embeddings=128, tie_word_embeddings=True)).eval()
    model.save_pretrained(work / "llama")
    try:  # what every push used to do: the whole model into shared memory, here too small
        save_file({k: v.clone().contiguous() for k, v in model.state_dict().items()}, str(tiny / "w.safetensors"))
        report["tiny_tmpfs_write"] = "fits"
    except Exception as exc:  # safetensors' SafetensorError: "No space left on device (os error 28)"
        report["tiny_tmpfs_write"] = f"{type(exc).__name__}: {exc}"
    (tiny / "w.safetensors").unlink(missing_ok=True)

    engine = VLLMSampler(str(work / "llama"), shm_dir=str(tiny), **ENGINE)
    said: list[str] = []
    sync = PolicySync(engine, model, sleep=False, say=said.append)
    routes, gaps = [], []
    for shm in (tiny, roomy):
        engine.shm_dir = str(shm)
        move(model)  # embeddings (tied to the head) included
        sync.push()
        routes.append([engine.weight_route.kind, engine.weight_route.folder])
        gaps.append(gap(engine_logprobs(engine), model_logprobs(model)))
    engine.close()
    report.update(routes=routes, llama_push_vs_transformers=gaps, said=said, tmpdir=tempfile.gettempdir(),
                  leftovers=sorted(p.name for p in [*tiny.iterdir(), *roomy.iterdir()]))


def moe_names(work: Path, report: dict) -> None:
    from tests.training.sampling.test_checkpoint_format import tiny_moe
    from toolgym.agents.vllm_sampler import VLLMSampler
    from toolgym.training.sampling.policy_sync import PolicySync

    shape = {"hidden": 64, "head_dim": 32, "moe_inner": 32, "arch": "mixtral"}  # vLLM's CPU kernels' smallest
    tiny_moe(False, **shape).save_pretrained(work / "mixtral")
    trained = tiny_moe(False, **shape)
    move(trained, ("experts", "mlp.gate", "q_proj"))
    trained.save_pretrained(work / "mixtral-trained")  # the reference checkpoint: what vLLM is meant to read
    engine = VLLMSampler(str(work / "mixtral"), **ENGINE)
    before = engine_logprobs(engine)
    PolicySync(engine, trained, sleep=False).push()
    pushed = engine_logprobs(engine)
    engine.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(work / "mixtral-trained"),
                                                        "is_checkpoint_format": True})
    engine.llm.reset_prefix_cache()
    reference = engine_logprobs(engine)
    engine.close()
    report.update(moe_pushed_vs_reference=gap(pushed, reference), moe_pushed_vs_before=gap(pushed, before),
                  moe_reload_vs_transformers=gap(reference, model_logprobs(trained)))


def main() -> None:
    work = Path(sys.argv[1])
    report: dict = {}
    transport(work, report)
    moe_names(work, report)
    print("RESULT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
