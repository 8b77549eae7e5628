"""Rollout throughput on Ray: 1 vs 2 rollout workers on a sandbox-heavy workload, and a sizing model.

1. Measures the per-component costs on this machine: one sampler replica's decode rate (batch 1 and
   batch 8, one torch thread like a worker with one CPU) and one sandbox call of the workload.
2. Runs the same rollout job (``--tasks`` prompts x ``--group`` episodes of ``SandboxLoadEnv``: each
   turn runs ``--work-s`` seconds of CPU-bound Python in the sandbox) on a local Ray cluster with 1
   worker, then 2 workers (each worker = a sampler replica + a sandbox pool of 1, i.e. one "node"),
   ``--rounds`` times alternating, after a warm-up group on each pool. Prints episodes/s and the ratio,
   for CPU-bound calls (needs free cores: on a busy machine the ratio drops) and for calls that wait
   (``time.sleep`` in the sandbox: a node's sandbox slots, not its cores, are the limit).
3. Prints the modelled throughput (toolgym.distributed.sizing) for N sampler replicas x M sandbox
   nodes from the measured costs, and the model's prediction for the measured 1- and 2-worker setups.

    .venv/bin/python benchmarks/scaling.py [--tasks 6] [--group 2] [--turns 2] [--work-s 0.25] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import statistics
import time

import torch

from toolgym.agents.hf_sampler import HFSampler
from toolgym.agents.runner import EpisodeLimits, TaskSpec
from toolgym.agents.sampling import SamplingParams
from toolgym.distributed.cluster import connect, shutdown
from toolgym.distributed.driver import GroupJob, RayRolloutPool
from toolgym.distributed.loadenv import SandboxLoadEnv, work_code
from toolgym.distributed.sizing import ComponentCosts, table, throughput
from toolgym.sandbox import open_sandbox
from toolgym.training.model.demo import build_demo


def decode_rate(model, tok, batch: int, new_tokens: int = 32, repeats: int = 3) -> float:
    """Tokens/s of one in-process HF sampler replica at a given batch size (median of repeats)."""
    sampler = HFSampler(model, tok)
    prompt = tok.encode("Job 1: run the workload 3 times. Call the work tool.")
    params = SamplingParams(temperature=1.0, max_tokens=new_tokens, seed=0)
    rates = []
    for _ in range(repeats):
        ps = [params.with_(seed=i) for i in range(batch)]

        async def go(ps: list[SamplingParams] = ps) -> list:
            return await asyncio.gather(*(sampler.agenerate([prompt], p) for p in ps))

        t = time.perf_counter()
        out = asyncio.run(go())
        dt = time.perf_counter() - t
        rates.append(sum(len(o[0][0].token_ids) for o in out) / dt)
    return statistics.median(rates)


def calibrate(sb, work_s: float) -> tuple[int, float]:
    """Loop iterations that take about ``work_s`` in the sandbox, and the measured wall time of one call."""
    sb.run(work_code(1000))  # warm-up: the first call pays for starting the sandbox worker

    def wall(n: int) -> float:
        t = time.perf_counter()
        sb.run(work_code(n))
        return time.perf_counter() - t

    empty = min(wall(0) for _ in range(3))
    iters = 1_000_000
    for _ in range(2):  # scale twice: the second pass corrects for the first estimate's noise
        per_iter = max(wall(iters) - empty, 1e-3) / iters
        iters = max(1000, int((work_s - empty) / per_iter))
    walls = []
    for _ in range(3):
        t = time.perf_counter()
        r = sb.run(work_code(iters))
        walls.append(time.perf_counter() - t)
        assert r.status == "ok", r
    return iters, statistics.median(walls)


def sandbox_ceiling(sb, iters: int, calls: int = 6) -> float:
    """No Ray: ``calls`` CPU-bound sandbox calls one after another on 1 slot, then split over 2 slots; the
    throughput ratio is what the cores give 2 sandboxes now (sustained, like a rollout run)."""

    async def lane(n: int) -> None:
        for _ in range(n):
            await sb.arun(work_code(iters))

    async def go(lanes: int) -> float:
        t = time.perf_counter()
        await asyncio.gather(*(lane(calls // lanes) for _ in range(lanes)))
        return time.perf_counter() - t

    one = asyncio.run(go(1))
    two = asyncio.run(go(2))
    return one / two


def timed_run(pool: RayRolloutPool, jobs: list[GroupJob]) -> tuple[float, list]:
    t = time.perf_counter()
    groups = pool.run(jobs)
    dt = time.perf_counter() - t
    return sum(len(g) for g in groups) / dt, groups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=6)
    ap.add_argument("--group", type=int, default=2)
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--work-s", type=float, default=0.25)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cores = os.cpu_count() or 1
    corpus = ["Call the work tool.", "Job 3: run the workload 3 times.", "```python\nprint(1)\n```"] * 40
    model, tok = build_demo(corpus, None, vocab_size=320, layers=2, hidden=64, heads=4, intermediate=128,
                            max_positions=512, seed=0)

    # 1. component costs
    gen1, gen8 = decode_rate(model, tok, 1), decode_rate(model, tok, 8)
    with open_sandbox("auto", pool_size=1) as sb:
        iters, call_s = calibrate(sb, args.work_s)
        backend = sb.backend
    print(f"machine: {cores} cores; sandbox backend: {backend}")
    print(f"sampler replica decode: {gen1:.0f} tokens/s at batch 1, {gen8:.0f} tokens/s at batch 8 (1 thread)")
    print(f"sandbox call (workload of {iters} iterations): {call_s * 1000:.0f} ms")

    # 2. 1 vs 2 workers, alternating, on two workloads: CPU-bound and waiting (sleep) sandbox calls
    params = SamplingParams(temperature=1.0, max_tokens=16)
    limits = EpisodeLimits(max_turns=args.turns + 1, max_total_tokens=512)
    envs = {"cpu": functools.partial(SandboxLoadEnv, turns=args.turns, iters=iters),
            "sleep": functools.partial(SandboxLoadEnv, turns=args.turns, iters=0, sleep_s=args.work_s)}

    def jobs(kind: str, n: int, step: int) -> list[GroupJob]:
        return [GroupJob(key=(step, i), task_index=i, spec=TaskSpec(seed=i), group_size=args.group, env=envs[kind],
                         params=params, limits=limits, seed=7) for i in range(n)]

    # a shared box: other processes' memory must not make Ray's monitor kill the measured workers
    os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
    connect(num_cpus=max(cores, 3))
    rates: dict[str, dict[int, list[float]]] = {k: {1: [], 2: []} for k in envs}
    trajs: list = []
    pools: dict[int, RayRolloutPool] = {}
    try:
        # both pools live side by side (an idle pool costs no CPU); each worker = 1 replica + 1 sandbox
        for w in (1, 2):
            pools[w] = RayRolloutPool(model, tok, num_workers=w, cpus_per_worker=1, sandbox="auto",
                                      sandbox_pool=1, max_in_flight=2)
            pools[w].run(jobs("sleep", w, step=-1))  # warm-up: first call of every sampler and sandbox
        step = 0
        ceiling: list[float] = []
        for _ in range(args.rounds):
            with open_sandbox("auto", pool_size=2) as sb:
                ceiling.append(sandbox_ceiling(sb, iters))
            for kind in envs:
                for w in (1, 2):
                    step += 1
                    rate, groups = timed_run(pools[w], jobs(kind, args.tasks, step))
                    rates[kind][w].append(rate)
                    trajs += [t for g in groups for t in g]
    finally:
        for p in pools.values():
            p.close()
        shutdown()
    assert all(t.reward == 1.0 for t in trajs), "a sandbox call failed"
    tokens = statistics.mean(t.num_model_tokens for t in trajs)
    print(f"workload: {args.tasks} prompts x {args.group} episodes, {args.turns} sandbox calls of "
          f"~{args.work_s:g} s and {tokens:.0f} sampled tokens per episode; {args.rounds} rounds")
    ratio: dict[str, float] = {}
    for kind in envs:
        what = "CPU-bound Python" if kind == "cpu" else "sleep (waiting tool)"
        for w in (1, 2):
            print(f"  {kind:5s} {w} worker{'s' if w > 1 else ' '}: "
                  + ", ".join(f"{r:.2f}" for r in rates[kind][w]) + " episodes/s")
        rs = [b / a for a, b in zip(rates[kind][1], rates[kind][2], strict=True)]
        ratio[kind] = statistics.median(rs)
        print(f"  {kind:5s} ratio 2 workers / 1 worker ({what}): median {ratio[kind]:.2f}x "
              f"(rounds: {', '.join(f'{r:.2f}' for r in rs)}; target >= 1.6x)")
    print(f"  ceiling without Ray: 6 CPU-bound sandbox calls on 2 slots vs 1 slot: median "
          f"{statistics.median(ceiling):.2f}x (rounds: {', '.join(f'{c:.2f}' for c in ceiling)})")
    load = os.getloadavg()[0]
    print(f"load average during the run: {load:.1f} on {cores} cores (other processes compete with CPU-bound calls)")
    rates_cpu = rates["cpu"]

    # 3. the model
    costs = ComponentCosts(batch_tokens_per_s=gen8, tokens_per_episode=tokens, call_s=call_s,
                           calls_per_episode=args.turns, sandboxes_per_node=1)
    for w in (1, 2):
        rate, side = throughput(costs, w, w)
        print(f"model, {w} sampler + {w} sandbox node(s) of 1 sandbox: {rate:.2f} episodes/s ({side}-bound); "
              f"measured median {statistics.median(rates_cpu[w]):.2f} (cpu workload)")
    print("modelled episodes/s (gen: sampler-bound, sbx: sandbox-bound), 1 sandbox per node:")
    print(table(costs, [1, 2, 4, 8], [1, 2, 4, 8, 16]))
    if args.json:
        print(json.dumps({"decode_tps_b1": gen1, "decode_tps_b8": gen8, "call_s": call_s, "rates": rates,
                          "ratio": ratio, "tokens_per_episode": tokens}))


if __name__ == "__main__":
    main()
