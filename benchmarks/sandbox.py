"""Sandbox performance, measured side by side in one run (ratios, never absolute targets).

    .venv/bin/python benchmarks/sandbox.py [--backend docker|local] [--n 200] [--mixed 1000] [--json]

1. per-call overhead: `run("pass")` on a warm pool vs a bare `python3 -I -S -c pass`
   subprocess on the host, interleaved call by call (target: p50 ratio <= 0.8, stretch 0.5);
2. vs a naive `docker exec` per call into the same kind of container (target: >= 5x faster);
3. throughput at concurrency 2 x cores, beside the host's bare-subprocess throughput;
4. 1,000 mixed calls (normal, timeout, OOM, fork bomb) at concurrency 8: statuses, p99, and
   a leak count (containers, cgroups, processes of this run) after close: must be zero.
Exits non-zero when a target is missed or anything leaked.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from toolgym.sandbox import Limits, open_sandbox

TARGET_P50 = 0.8  # a warm sandbox call must cost less than starting a bare interpreter
BARE = [os.path.realpath(sys.executable), "-I", "-S", "-c", "pass"]
# kind: (code, expected status, wall limit); normal calls get room for a loaded machine
KINDS = {
    "normal": ("print(sum(range(1000)))", "ok", 10.0),
    "timeout": ("while True:\n    pass", "timeout", 1.0),
    "oom": ("x = bytearray(10 ** 10)", "oom", 5.0),
    "forkbomb": ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", None, 1.0),
}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def bare_call() -> float:
    t0 = time.perf_counter()
    subprocess.run(BARE, check=True)
    return time.perf_counter() - t0


def overhead(sb, n: int) -> dict:
    for _ in range(10):  # warm caches on both sides
        sb.run("pass")
        bare_call()
    box, bare = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        r = sb.run("pass")
        box.append(time.perf_counter() - t0)
        assert r.status == "ok", r
        bare.append(bare_call())
    return {"sandbox_p50_ms": 1e3 * pct(box, 0.5), "sandbox_p99_ms": 1e3 * pct(box, 0.99),
            "bare_p50_ms": 1e3 * pct(bare, 0.5), "bare_p99_ms": 1e3 * pct(bare, 0.99),
            "ratio_p50": pct(box, 0.5) / pct(bare, 0.5), "ratio_p99": pct(box, 0.99) / pct(bare, 0.99)}


def docker_exec(sb, n: int) -> dict:
    import docker

    from toolgym.sandbox.docker_backend import DockerWorker

    client = docker.from_env()
    worker = DockerWorker(client, sb.backend_impl.image, sb.limits)  # same container settings as the pool
    try:
        c = worker.container
        for _ in range(3):
            c.exec_run(["python3", "-I", "-S", "-c", "pass"], user="65534:65534")
        ex, box = [], []
        for _ in range(n):
            t0 = time.perf_counter()
            res = c.exec_run(["python3", "-I", "-S", "-c", "pass"], user="65534:65534")
            ex.append(time.perf_counter() - t0)
            assert res.exit_code == 0
            t0 = time.perf_counter()
            sb.run("pass")
            box.append(time.perf_counter() - t0)
    finally:
        worker.close()
    return {"docker_exec_p50_ms": 1e3 * pct(ex, 0.5), "sandbox_p50_ms": 1e3 * pct(box, 0.5),
            "speedup_p50": pct(ex, 0.5) / pct(box, 0.5)}


def throughput(sb, calls: int, conc: int) -> dict:
    def timed(fn) -> float:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(conc) as ex:
            list(ex.map(lambda _: fn(), range(calls)))
        return calls / (time.perf_counter() - t0)

    box = timed(lambda: sb.run("pass"))
    bare = timed(bare_call)
    return {"concurrency": conc, "sandbox_calls_per_s": box, "bare_calls_per_s": bare, "ratio": box / bare}


def leaks(pid: int) -> dict:
    out = {"cgroups": len(glob.glob(f"/sys/fs/cgroup/*/toolgym/{pid}-*")), "containers": 0, "processes": 0}
    try:
        import docker

        out["containers"] = len(docker.from_env().containers.list(all=True, filters={"label": f"toolgym.pid={pid}"}))
    except Exception:  # noqa: BLE001 - no engine
        pass
    kids = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout.split()
    out["processes"] = len([k for k in kids if int(k) != os.getpid()]) - 1  # minus the ps itself
    return out


def mixed(backend: str, total: int, conc: int) -> dict:
    rng = random.Random(0)
    kinds = ["normal"] * 7 + ["timeout", "oom", "forkbomb"]
    plan = [rng.choice(kinds) for _ in range(total)]
    lim = Limits(timeout_s=1, memory_mb=256, pids=64, output_bytes=1 << 16)
    lat: dict[str, list[float]] = {k: [] for k in KINDS}
    statuses: dict[str, Counter] = {k: Counter() for k in KINDS}
    wrong = errors = 0
    sb = open_sandbox(backend, lim, pool_size=conc)
    try:
        sb.wait_ready(300)

        def one(kind: str) -> None:
            nonlocal wrong, errors
            code, want, wall = KINDS[kind]
            t0 = time.perf_counter()
            r = sb.run(code, limits=Limits(timeout_s=wall, memory_mb=256, pids=64, output_bytes=1 << 16))
            lat[kind].append(time.perf_counter() - t0)
            statuses[kind][r.status] += 1
            errors += r.status == "sandbox_error"
            if r.status == "sandbox_error" or (want is not None and r.status != want):
                wrong += 1

        t0 = time.perf_counter()
        with ThreadPoolExecutor(conc) as ex:
            list(ex.map(one, plan))
        wall = time.perf_counter() - t0
        discarded = sb.stats()["discarded"]
        reasons = sb.stats()["discard_reasons"]
    finally:
        sb.close()
    time.sleep(1.0)
    all_lat = [x for v in lat.values() for x in v]
    return {"calls": total, "concurrency": conc, "wall_s": wall, "p50_ms": 1e3 * pct(all_lat, 0.5),
            "p99_ms": 1e3 * pct(all_lat, 0.99),
            "p99_ms_by_kind": {k: round(1e3 * pct(v, 0.99), 1) for k, v in lat.items() if v},
            "statuses": {k: dict(v) for k, v in statuses.items()}, "unexpected": wrong, "sandbox_errors": errors,
            "workers_replaced": discarded, "replace_reasons": reasons, "leaks_after_close": leaks(os.getpid())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="docker", choices=["docker", "local"])
    ap.add_argument("--n", type=int, default=200, help="calls per latency measurement")
    ap.add_argument("--mixed", type=int, default=1000, help="calls in the mixed run (0 skips it)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    out: dict = {"backend": args.backend, "cores": cores, "bare": " ".join(BARE)}
    with open_sandbox(args.backend, Limits(timeout_s=10), pool_size=cores) as sb:
        sb.wait_ready(300)
        out["overhead"] = overhead(sb, args.n)
        if args.backend == "docker":
            out["vs_docker_exec"] = docker_exec(sb, max(20, args.n // 4))
        out["throughput"] = throughput(sb, 4 * args.n // 2, 2 * cores)
    if args.mixed:
        out["mixed"] = mixed(args.backend, args.mixed, 8)
    fails = []
    if out["overhead"]["ratio_p50"] > TARGET_P50:
        fails.append(f"p50 overhead ratio > {TARGET_P50}")
    if "vs_docker_exec" in out and out["vs_docker_exec"]["speedup_p50"] < 5:
        fails.append("less than 5x faster than docker exec")
    if args.mixed and (any(out["mixed"]["leaks_after_close"].values()) or out["mixed"]["sandbox_errors"]):
        fails.append("mixed run leaked or had sandbox errors")
    out["failed_targets"] = fails
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        o = out["overhead"]
        print(f"backend={args.backend} cores={cores} baseline: {out['bare']}")
        print(f"run('pass') p50 {o['sandbox_p50_ms']:.2f} ms vs bare {o['bare_p50_ms']:.2f} ms -> "
              f"ratio p50 {o['ratio_p50']:.2f} (target <= {TARGET_P50}, stretch 0.5); p99 {o['sandbox_p99_ms']:.2f} vs "
              f"{o['bare_p99_ms']:.2f} ms -> ratio p99 {o['ratio_p99']:.2f}")
        if "vs_docker_exec" in out:
            d = out["vs_docker_exec"]
            print(f"docker exec p50 {d['docker_exec_p50_ms']:.2f} ms vs run {d['sandbox_p50_ms']:.2f} ms -> "
                  f"{d['speedup_p50']:.1f}x faster (target >= 5x)")
        t = out["throughput"]
        print(f"throughput at concurrency {t['concurrency']}: {t['sandbox_calls_per_s']:.0f} calls/s vs bare "
              f"subprocess {t['bare_calls_per_s']:.0f} calls/s (ratio {t['ratio']:.2f})")
        if args.mixed:
            m = out["mixed"]
            print(f"mixed {m['calls']} calls at concurrency {m['concurrency']}: wall {m['wall_s']:.1f} s, "
                  f"p50 {m['p50_ms']:.1f} ms, p99 {m['p99_ms']:.1f} ms; p99 by kind {m['p99_ms_by_kind']}")
            print(f"  statuses {m['statuses']}; unexpected {m['unexpected']} (sandbox errors {m['sandbox_errors']}); workers replaced "
                  f"{m['workers_replaced']} {m['replace_reasons']}; leaks after close {m['leaks_after_close']}")
        print("targets: " + ("all met" if not fails else "MISSED: " + "; ".join(fails)))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
