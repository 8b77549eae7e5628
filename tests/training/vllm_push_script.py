"""Runs inside .venv-vllm in a private mount namespace (spawned by test_vllm_push.py, as root there): weight pushes
to the real vLLM CPU engine of a tiny Mixtral (mixture of experts), first through a tmpfs too small for them (the push falls back to
disk), then through one with room. Prints one ``RESULT {json}`` line with what the test checks."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def mount_tmpfs(folder: Path, size: str) -> None:
    folder.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=True)


def main() -> None:
    import torch
    import vllm
    from safetensors.torch import save_file
    from vllm.inputs import TokensPrompt

    from tests.training.test_checkpoint_format import tiny_moe
    from toolgym.agents.vllm_sampler import VLLMSampler
    from toolgym.training.policy_sync import PolicySync

    work = Path(sys.argv[1])
    tiny, roomy = work / "tiny-shm", work / "roomy-shm"
    mount_tmpfs(tiny, "128k")  # the model below is ~0.4 MB in float32
    mount_tmpfs(roomy, "8m")
    shape = {"hidden": 64, "head_dim": 32, "moe_inner": 32, "arch": "mixtral"}  # vLLM's CPU kernels' smallest
    start = tiny_moe(False, **shape)
    start.save_pretrained(work / "start")
    trained = tiny_moe(False, **shape)
    with torch.no_grad():  # "training": experts, router and attention all move
        for name, p in trained.named_parameters():
            if "experts" in name or "mlp.gate" in name or "q_proj" in name:
                p.add_(0.5 * torch.randn_like(p))
    trained.save_pretrained(work / "trained")  # the reference checkpoint: what vLLM is meant to read

    report: dict = {}
    try:  # what the push used to do: the whole model into a too small shared memory
        save_file({k: v.contiguous() for k, v in trained.state_dict().items()}, str(tiny / "model.safetensors"))
        report["tiny_tmpfs_write"] = "fits"
    except Exception as exc:  # safetensors' SafetensorError: "No space left on device (os error 28)"
        report["tiny_tmpfs_write"] = f"{type(exc).__name__}: {exc}"
    (tiny / "model.safetensors").unlink(missing_ok=True)

    engine = VLLMSampler(str(work / "start"), max_model_len=128, enforce_eager=True, dtype="float32",
                         max_num_seqs=4, max_num_batched_tokens=256, skip_tokenizer_init=True, shm_dir=str(tiny))
    ids = [3, 17, 5, 40, 9, 22, 61, 8, 30, 12]

    def prompt_logprobs() -> list[float]:
        sp = vllm.SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0, detokenize=False)
        (res,) = engine.llm.generate([TokensPrompt(prompt_token_ids=ids)], sp, use_tqdm=False)
        return [float(step[t].logprob) for step, t in zip(res.prompt_logprobs[1:], ids[1:], strict=True)]

    said: list[str] = []
    sync = PolicySync(engine, trained, sleep=False, say=said.append)
    before = prompt_logprobs()
    sync.push()  # tiny tmpfs: falls back to disk
    report["route_1"] = [engine.weight_route.kind, engine.weight_route.folder]
    pushed = prompt_logprobs()
    engine.shm_dir = str(roomy)
    sync.push()  # room now: shared memory
    report["route_2"] = [engine.weight_route.kind, engine.weight_route.folder]
    pushed_again = prompt_logprobs()
    engine.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(work / "trained"),
                                                        "is_checkpoint_format": True})
    engine.llm.reset_prefix_cache()
    reference = prompt_logprobs()
    with torch.no_grad():
        lp = torch.log_softmax(trained(torch.tensor([ids])).logits[0].float(), -1)
    hf = [float(lp[i - 1, ids[i]]) for i in range(1, len(ids))]

    def gap(a: list[float], b: list[float]) -> float:
        return max(abs(x - y) for x, y in zip(a, b, strict=True))

    report.update(said=said, tmpdir=tempfile.gettempdir(), pushed_vs_reference=gap(pushed, reference),
                  pushed_again_vs_reference=gap(pushed_again, reference), pushed_vs_before=gap(pushed, before),
                  vllm_reload_vs_transformers=gap(reference, hf), leftovers=sorted(p.name for p in roomy.iterdir()))
    engine.close()
    print("RESULT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
