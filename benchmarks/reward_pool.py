"""Benchmark: what running an author's sync reward function in a worker process costs, against the
thread it ran on before (issue 36: a stall on the thread froze every episode and could not be killed).

N scorings of an exact-match reward that takes `answer`, `task` and `messages` (an episode of six
messages, about 4 KB), one after another and in batches of 8 at once, both ways in alternating
rounds; the pool's children are started before timing. The function is imported from this file by
its module name, as an environment's reward function would be from its package.

    .venv/bin/python benchmarks/reward_pool.py [--n 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import statistics
import sys
import time
from pathlib import Path


def exact(answer, task, messages):
    """1.0 when the answer is the ground truth and the episode has an assistant turn."""
    return float(answer == task.ground_truth and any(m["role"] == "assistant" for m in messages))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    from toolgym.envs.rubric import Rubric
    from toolgym.envs.scoring.reward_pool import pool
    from toolgym.envs.types import Task

    sys.path.insert(0, str(Path(__file__).parent))
    fn = importlib.import_module(Path(__file__).stem).exact  # by name: a child can import it
    task = Task(id="t", prompt=[{"role": "user", "content": "What is 2+2?"}], ground_truth="4")
    messages = [{"role": r, "content": "x" * 650} for r in ("user", "assistant", "tool") * 2]
    kw = {"answer": "4", "task": task, "messages": messages, "completion": "\\boxed{4}"}
    ways = {"thread": Rubric([fn], isolate=False), "worker": Rubric([fn])}

    async def one_by_one(rubric: Rubric) -> float:
        t0 = time.perf_counter()
        for _ in range(args.n):
            assert (await rubric.ascore(**kw)).total == 1.0
        return (time.perf_counter() - t0) / args.n

    async def in_batches(rubric: Rubric) -> float:
        t0 = time.perf_counter()
        for _ in range(args.n // 8):
            res = await asyncio.gather(*(rubric.ascore(**kw) for _ in range(8)))
            assert all(r.total == 1.0 for r in res)
        return (time.perf_counter() - t0) / (args.n // 8 * 8)

    asyncio.run(in_batches(ways["worker"]))  # the pool's children started (up to 8)
    figures: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for way, rubric in ways.items():
            figures.setdefault((way, "one by one"), []).append(asyncio.run(one_by_one(rubric)))
            figures.setdefault((way, "8 at once"), []).append(asyncio.run(in_batches(rubric)))
    print(f"{'mode':<12} {'thread us/scoring':>18} {'worker us/scoring':>18} {'ratio':>6}")
    for mode in ("one by one", "8 at once"):
        t, w = (statistics.median(figures[(way, mode)]) * 1e6 for way in ("thread", "worker"))
        print(f"{mode:<12} {t:>18.0f} {w:>18.0f} {w / t:>6.2f}")
    print(f"children: {len(pool()._all)}, kills: {pool().kills}")


if __name__ == "__main__":
    main()
