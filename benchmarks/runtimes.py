"""Docker sandboxes under runc vs gVisor's runsc, side by side in one run (interleaved call by call).

    .venv/bin/python benchmarks/runtimes.py [--calls 30] [--tests 20] [--judges 5] [--json]

Per call: `run("pass")` on a warm pool of one. Per judged test: one stdio program judged on `--tests`
tests, the call's wall time divided by the number of tests. Also the time to start a sandbox.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from toolgym.sandbox import Limits, judge, open_sandbox

PROGRAM = "n = int(input())\nprint(n * 2)\n"


def _p50(xs: list[float]) -> float:
    return statistics.median(xs) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--tests", type=int, default=20)
    ap.add_argument("--judges", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    limits = Limits(timeout_s=5, memory_mb=256)
    tests = [{"input": f"{i}\n", "output": f"{2 * i}\n"} for i in range(args.tests)]
    boxes, start = {}, {}
    for rt in ("runc", "runsc"):
        t0 = time.perf_counter()
        boxes[rt] = open_sandbox("docker", limits, pool_size=1, runtime=None if rt == "runc" else rt).wait_ready()
        start[rt] = time.perf_counter() - t0
    calls: dict[str, list[float]] = {rt: [] for rt in boxes}
    per_test: dict[str, list[float]] = {rt: [] for rt in boxes}
    try:
        for _ in range(args.calls):
            for rt, sb in boxes.items():
                t0 = time.perf_counter()
                res = sb.run("pass")
                calls[rt].append(time.perf_counter() - t0)
                assert res.status == "ok", res
        for _ in range(args.judges):
            for rt, sb in boxes.items():
                t0 = time.perf_counter()
                rep = judge(sb, PROGRAM, tests, "stdio")
                per_test[rt].append((time.perf_counter() - t0) / len(tests))
                assert rep.all_passed, (rt, rep.notes, rep.verdicts[0])
    finally:
        for sb in boxes.values():
            sb.close()
    out = {rt: {"start_s": round(start[rt], 2), "call_p50_ms": round(_p50(calls[rt]), 1),
                "judged_test_p50_ms": round(_p50(per_test[rt]), 1)} for rt in boxes}
    if args.json:
        print(json.dumps(out))
        return
    print(f"{'runtime':8} {'start s':>8} {'call p50 ms':>12} {'per judged test p50 ms':>24}")
    for rt, row in out.items():
        print(f"{rt:8} {row['start_s']:>8} {row['call_p50_ms']:>12} {row['judged_test_p50_ms']:>24}")
    print(f"runsc/runc: call x{out['runsc']['call_p50_ms'] / out['runc']['call_p50_ms']:.2f}, judged test "
          f"x{out['runsc']['judged_test_p50_ms'] / out['runc']['judged_test_p50_ms']:.2f}")


if __name__ == "__main__":
    main()
