"""Two CPU vLLM servers side by side: each on its own cores (toolgym's choice) against vLLM's automatic binding.

    .venv/bin/python benchmarks/server_cores.py [--rounds 2] [--groups 8] [--group 4] [--tokens 64]

vLLM's CPU build binds a server's OpenMP threads to the first cores of its node, whichever server it is, so two
servers started side by side would compute on the same cores. ``rollout.servers: N`` now gives each its own
share (``VLLM_CPU_OMP_THREADS_BIND``); ``auto`` below is what vLLM chose before. Each round starts both servers
of SmolLM2-135M in each arm, in turn (A B, A B), and sends ``--groups`` groups of ``--group`` requests spread
over the two servers by the router; it prints generated tokens per second of each arm and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_arm(model: str, bind: str | None, groups: int, group: int, tokens: int) -> tuple[float, list[str]]:
    """Tokens per second over every group, and the cores each server logged it bound."""
    import re

    from toolgym.agents.sampling import SamplingParams
    from toolgym.agents.server_sampler import VLLMServerSampler

    if bind is None:
        os.environ.pop("VLLM_CPU_OMP_THREADS_BIND", None)
    else:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = bind  # the user's setting wins over toolgym's shares
    sampler = VLLMServerSampler(model, servers=2, python=str(ROOT / ".venv-vllm" / "bin" / "python"),
                                dtype="float32", enforce_eager=True, max_model_len=1024, max_num_seqs=8,
                                max_num_batched_tokens=1024, sampling_overrides={"ignore_eos": True})
    try:
        bound = [", ".join(re.findall(r"local_rank=0, core ids=(\[[\d, ]*\])", Path(p.log_path).read_text()))
                 for p in sampler.processes]
        prompt = list(range(100, 140))
        params = [SamplingParams(max_tokens=tokens, temperature=1.0, affinity=f"g{g}", seed=g)
                  for g in range(groups)]

        async def all_groups() -> list:
            return await asyncio.gather(*(sampler.agenerate([prompt + [g]] * group, p) for g, p in enumerate(params)))

        asyncio.run(all_groups())  # warm-up: first requests compile and fill caches
        t0 = time.perf_counter()
        out = asyncio.run(all_groups())
        seconds = time.perf_counter() - t0
        made = sum(len(s.token_ids) for per_group in out for prompt_samples in per_group for s in prompt_samples)
        return made / seconds, bound
    finally:
        sampler.close()
        os.environ.pop("VLLM_CPU_OMP_THREADS_BIND", None)


def main() -> None:
    from toolgym.assets import resolve_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    a = ap.parse_args()
    model = resolve_model("smollm2-135m-instruct")
    rates: dict[str, list[float]] = {"own cores": [], "auto": []}
    for r in range(a.rounds):
        for arm, bind in (("own cores", None), ("auto", "auto")):
            rate, bound = run_arm(model, bind, a.groups, a.group, a.tokens)
            rates[arm].append(rate)
            load = os.getloadavg()[0]
            print(f"round {r} {arm:9s} {rate:7.1f} tokens/s  servers bound to {' and '.join(bound)}  load {load:.1f}",
                  flush=True)
    best = {arm: max(v) for arm, v in rates.items()}
    print(f"best of {a.rounds}: own cores {best['own cores']:.1f} tokens/s, auto {best['auto']:.1f} tokens/s, "
          f"ratio {best['own cores'] / best['auto']:.2f}x")


if __name__ == "__main__":
    main()
