"""Cost of a stateful session's cell, this tree beside another source tree (e.g. main's), interleaved.

    .venv/bin/python benchmarks/session_cells.py --baseline-src /path/to/other/src [--backend local] [--n 200]

Each tree runs in a process of its own (the executor is injected from the tree's toolgym), with one
warm sandbox and one open session; both get the same batches of `x += 1` cells, in turns, so a busy
machine slows both alike. Prints each tree's per-cell p50/mean and the ratio this/baseline (this tree
freezes the session between cells, thaws it for the next, and reads the cell's CPU time).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROUNDS = 5


def worker(backend: str, n: int) -> None:
    """Serve batches: one line in ("go"), one JSON line out (the batch's per-cell seconds)."""
    from toolgym.sandbox import Limits, open_sandbox

    with open_sandbox(backend, Limits(timeout_s=10), pool_size=1) as sb:
        sb.wait_ready(120)
        with sb.session() as s:
            s.run("x = 0")
            print("ready", flush=True)
            for _line in sys.stdin:
                times = []
                for _ in range(n):
                    t0 = time.perf_counter()
                    r = s.run("x += 1")
                    times.append(time.perf_counter() - t0)
                    if r.status != "ok":
                        raise SystemExit(f"a cell failed: {r}")
                print(json.dumps(times), flush=True)


def start(src: str, backend: str, n: int) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
    proc = subprocess.Popen([sys.executable, __file__, "--worker", "--backend", backend, "--n", str(n)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    if proc.stdout.readline().strip() != "ready":
        raise SystemExit(f"the worker for {src} did not start")
    return proc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-src", help="the other tree's src/ folder")
    ap.add_argument("--backend", default="local")
    ap.add_argument("--n", type=int, default=200, help="cells per batch")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.backend, args.n)
    if not args.baseline_src:
        raise SystemExit("--baseline-src is required: the src/ folder of the tree to compare with")
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    procs = {"this": start(here, args.backend, args.n), "baseline": start(args.baseline_src, args.backend, args.n)}
    times: dict[str, list[float]] = {k: [] for k in procs}
    try:
        for _ in range(ROUNDS):
            for name, proc in procs.items():
                proc.stdin.write("go\n")
                proc.stdin.flush()
                times[name] += json.loads(proc.stdout.readline())
    finally:
        for proc in procs.values():
            proc.stdin.close()
            proc.wait(60)
    p50 = {k: statistics.median(v) for k, v in times.items()}
    mean = {k: statistics.fmean(v) for k, v in times.items()}
    for k in procs:
        print(f"{args.backend} {k:8s}: {len(times[k])} cells, p50 {p50[k] * 1e3:.2f} ms, mean {mean[k] * 1e3:.2f} ms")
    print(f"ratio this/baseline: p50 {p50['this'] / p50['baseline']:.2f}, mean {mean['this'] / mean['baseline']:.2f}")


if __name__ == "__main__":
    main()
