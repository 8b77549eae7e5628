"""Pool robustness and cleanup: dead executors are replaced, nothing of toolgym is left
behind after close, at interpreter exit, or after a crash (orphans are reaped)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.sandbox.conftest import LIMITS, descendants, leak_snapshot, our_cgroups
from toolgym.sandbox import Limits, open_sandbox

MIX = [
    ("print('ok')", "ok"),
    ("while True: pass", "timeout"),
    ("x = bytearray(10 ** 10)", "oom"),
    ("import os\nwhile True:\n    try: os.fork()\n    except OSError: pass", None),
    ("import os, time\nif os.fork() == 0:\n    os.setsid(); time.sleep(100)\nprint('ok')", "ok"),
]


def _wait_for(pred, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.2)
    return pred()


def _kill_worker(worker) -> None:
    """A real fault: the sandbox dies under the pool (container killed / namespace killed)."""
    if hasattr(worker, "container"):
        worker.container.kill()
    elif worker.cgroup is not None:
        worker.cgroup.kill()  # every process of the sandbox, executor included
    else:
        os.killpg(worker.proc.pid, signal.SIGKILL)
        worker.proc.wait()


def test_dead_executor_is_replaced(backend):
    with open_sandbox(backend, LIMITS, pool_size=1) as sb:
        sb.wait_ready(120)
        _kill_worker(sb._pool._idle[0])
        r = sb.run("print(1)")  # its sandbox was dead before it started: run again on a fresh one
        assert (r.status, r.stdout) == ("ok", "1\n"), r
        r = sb.run("print(2)")
        assert (r.status, r.stdout) == ("ok", "2\n")
        assert sb.stats()["discarded"] == 1 and sb.stats()["live"] == 1


@pytest.mark.slow
def test_waiting_for_a_busy_pool_never_fails(backend):
    """A worker busy with a slow call comes free within that call's deadline: waiting for it is never an
    infrastructure failure (which would mask the waiting episode), however long it takes. A worker a
    session holds (it comes free only when the session closes) does not count against the pool's size:
    the pool starts another rather than make anyone wait for the session."""
    from toolgym.errors import SandboxUnavailable

    with open_sandbox(backend, LIMITS, pool_size=1) as sb:
        sb.wait_ready(120)
        with ThreadPoolExecutor(1) as ex:
            slow = ex.submit(sb.run, "import time\ntime.sleep(2)\nprint('slow')")
            while not sb.stats()["busy"]:
                time.sleep(0.01)
            worker = sb._pool.acquire(timeout=0.2)  # the deadline passes long before the slow call ends
            assert slow.result().stdout == "slow\n"
        sb._pool.release(worker)
        with sb.session() as s:
            assert s.run("print(1)").stdout == "1\n"
            other = sb._pool.acquire(timeout=0.2)  # before: SandboxUnavailable, "every one is held by a session"
            assert sb.stats()["live"] == 2 and other.call({"op": "ping"}, 30)["ok"]
            sb._pool.release(other)
        assert sb.run("print(2)").stdout == "2\n"
        assert sb.stats()["live"] == 1  # back to its size once the session ended
        with pytest.raises(SandboxUnavailable, match="closed"):
            sb.close()
            sb._pool.acquire(timeout=0.2)


@pytest.mark.slow
def test_concurrent_hostile_mix_leaves_nothing_behind(backend):
    before = leak_snapshot()
    lim = Limits(timeout_s=2, memory_mb=256, pids=64, output_bytes=1 << 16)
    with open_sandbox(backend, lim, pool_size=2) as sb:
        sb.wait_ready(120)
        with ThreadPoolExecutor(4) as ex:
            results = list(ex.map(lambda item: (item[1], sb.run(item[0])), MIX * 3))
        for want, r in results:
            assert r.status != "sandbox_error", r
            if want is not None:
                assert r.status == want, (want, r)
        assert sb.run("print('still fine')").stdout == "still fine\n"
        assert sb.stats()["live"] <= 2
    assert _wait_for(lambda: leak_snapshot() == before), (before, leak_snapshot())


def test_session_and_runs_share_the_pool(backend):
    with open_sandbox(backend, LIMITS, pool_size=2) as sb:
        sb.wait_ready(120)  # else the session's worker, held while the other starts, makes the pool start a third
        with sb.session() as s:
            s.run("acc = []")
            for i in range(3):
                assert sb.run(f"print({i})").stdout == f"{i}\n"
                s.run(f"acc.append({i})")
            assert s.run("print(acc)").stdout == "[0, 1, 2]\n"
        assert sb.stats()["idle"] == 2


def _child(backend: str, how: str) -> int:
    code = textwrap.dedent(f"""
        import os, signal, sys
        from toolgym.sandbox import open_sandbox, Limits
        sb = open_sandbox({backend!r}, Limits(timeout_s=5), pool_size=2)
        sb.wait_ready(120)
        assert sb.run("print(1)").stdout == "1\\n"
        print(os.getpid(), flush=True)
        if {how!r} == "crash":
            os.kill(os.getpid(), signal.SIGKILL)
        sys.exit(0)  # no close(): atexit must clean up
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert proc.stdout.strip(), proc.stderr
    return int(proc.stdout.split()[0])


def _containers_of(pid: int) -> list:
    import docker

    client = docker.from_env()
    return client.containers.list(all=True, filters={"label": f"toolgym.pid={pid}"}, ignore_removed=True)


def test_atexit_cleans_up(backend):
    pid = _child(backend, "exit")
    if backend == "docker":
        assert _wait_for(lambda: not _containers_of(pid))
    import glob

    assert not glob.glob(f"/sys/fs/cgroup/*/toolgym/{pid}-*")


def test_orphans_of_a_crash_are_reaped(backend):
    import glob

    from toolgym.sandbox import cgroups

    pid = _child(backend, "crash")
    if backend == "docker":
        import docker

        from toolgym.sandbox.docker_backend import reap_orphans

        reap_orphans(docker.from_env())
        assert _wait_for(lambda: not _containers_of(pid))
    else:
        left = glob.glob(f"/sys/fs/cgroup/*/toolgym/{pid}-*")
        assert left, "a crash leaves its cgroups (reaped below)"

        def procs() -> int:
            n = 0
            for d in left:
                try:
                    n += len(open(os.path.join(d, "cgroup.procs")).read().split())
                except OSError:
                    pass
            return n

        # the executor sees EOF on its stdin and takes its whole sandbox down by itself
        assert _wait_for(lambda: procs() == 0), "sandbox processes outlived their crashed owner"
        cgroups.reap_orphans()
        assert not glob.glob(f"/sys/fs/cgroup/*/toolgym/{pid}-*")
    assert our_cgroups() == our_cgroups()  # ours untouched
    assert all(p != pid for p in descendants())
