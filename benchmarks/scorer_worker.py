"""Benchmark: what scoring a reasoning-gym answer in the scorer worker costs, against the same
scoring in the trainer's process (what toolgym did before round-7 z01).

For each dataset, N answers (the reference answer and a wrong one, alternately, over N tasks) are
scored both ways, in alternating rounds: in-process is the entry regenerated and the scorer run
under the guard (`rg_score(ds, answer, ds[index])`); the worker is `rg_reward`, the round trip to
the warm child included. The worker is started and each dataset built before timing.

    .venv/bin/python benchmarks/scorer_worker.py [--n 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

DATASETS = ("basic_arithmetic", "coin_flip", "letter_counting", "spell_backward")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    from toolgym.envs.builtin.reasoning_gym import get_dataset, rg_reward, rg_source
    from toolgym.envs.verifiers import rg_score

    print(f"{'dataset':<18} {'in-process us/answer':>22} {'worker us/answer':>18} {'extra us':>9}")
    for name in DATASETS:
        ds, src = get_dataset(name, 0), rg_source(name, 0)
        tasks = [src.get(i) for i in range(args.n)]
        answers = [t.ground_truth if i % 2 == 0 else "wrong" for i, t in enumerate(tasks)]
        rg_reward(answers[0], "", tasks[0])  # the worker's dataset is built

        local, remote = [], []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            for i, a in enumerate(answers):
                rg_score(ds, a, ds[i])
            local.append((time.perf_counter() - t0) / args.n * 1e6)
            t0 = time.perf_counter()
            for t, a in zip(tasks, answers, strict=True):
                rg_reward(a, "", t)
            remote.append((time.perf_counter() - t0) / args.n * 1e6)
        a, b = statistics.median(local), statistics.median(remote)
        print(f"{name:<18} {a:>22.1f} {b:>18.1f} {b - a:>9.1f}")


if __name__ == "__main__":
    main()
