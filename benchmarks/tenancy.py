"""Tenancy benchmark: what keeping episodes of one task apart costs a GRPO-shaped workload of tool calls.

    .venv/bin/python benchmarks/tenancy.py [--backend local|docker] [--tasks 8] [--group 4] [--calls 3]
                                           [--pool 4] [--json]

`tasks` x `group` episodes, all at once (as a rollout step runs them), each making `calls` python tool calls
in its episode (`tenancy.episode`), on one sandbox of `pool` workers. The rule (sandbox.tenancy) sends a
call to a worker that has served its task for no other episode, carried keys included, and replaces an
idle worker when none fits: it costs sandbox starts (`retired`) and the waits for them. Prints the wall
time, calls per second and the sandboxes replaced; run it on two checkouts to compare rules.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from toolgym.sandbox import Limits, open_sandbox, tenancy


async def _episode(sb, task: int, calls: int) -> None:
    with tenancy.episode({"task": task}):
        for i in range(calls):
            res = await sb.arun(f"print({task} + {i})")
            assert res.stdout == f"{task + i}\n", res


async def run(backend: str, tasks: int, group: int, calls: int, pool: int) -> dict:
    sb = open_sandbox(backend, Limits(timeout_s=10), pool_size=pool)
    try:
        sb.wait_ready(300)
        t0 = time.monotonic()
        await asyncio.gather(*(_episode(sb, t, calls) for t in range(tasks) for _ in range(group)))
        wall = time.monotonic() - t0
        stats = sb.stats()
    finally:
        sb.close()
    n = tasks * group * calls
    return {"backend": backend, "episodes": tasks * group, "calls": n, "pool": pool, "wall_s": round(wall, 2),
            "calls_per_s": round(n / wall, 1), "retired": stats["retired"], "discarded": stats["discarded"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="local")
    ap.add_argument("--tasks", type=int, default=8)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--pool", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    out = asyncio.run(run(a.backend, a.tasks, a.group, a.calls, a.pool))
    print(json.dumps(out) if a.json else "  ".join(f"{k} {v}" for k, v in out.items()))


if __name__ == "__main__":
    main()
