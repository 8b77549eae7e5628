"""A stateful session is charged for everything it runs (issue 36, item 2), on both backends.

The red team's route: a cell starts a thread that ignores SIGXCPU and burns CPU, and returns. Between
cells nothing of the session may run (its interpreter is stopped until the next cell), every cell has
a hard CPU limit, and a running cell takes one of the pool's slots like any call. The CPU the thread
uses is read from the host, in /proc, where the thread is found by the name it gave itself."""

from __future__ import annotations

import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.sandbox.conftest import under_gvisor
from toolgym.sandbox import Limits

# routes to CPU between cells; each names the task that burns NAME, for the host to find it
ROUTES = {
    # the red team's: a thread that ignores SIGXCPU and never ends
    "thread": """
import ctypes, signal, threading, time
signal.signal(signal.SIGXCPU, signal.SIG_IGN)
def burn():
    ctypes.CDLL(None).prctl(15, NAME.encode(), 0, 0, 0)  # PR_SET_NAME: this thread's
    while True:
        pass
threading.Thread(target=burn, daemon=True).start()
time.sleep(0.3)
kept = "still here"
""",
    # a timer whose handler burns 1 CPU-s in the interpreter's own thread, after the cell returned
    "timer": """
import ctypes, signal, threading, time
ctypes.CDLL(None).prctl(15, NAME.encode(), 0, 0, 0)  # PR_SET_NAME: the interpreter's thread
def burn(*_):
    t = time.thread_time()
    while time.thread_time() - t < 1:
        pass
signal.signal(signal.SIGALRM, burn)
signal.setitimer(signal.ITIMER_REAL, 0.3)
kept = "still here"
""",
}
TICK = os.sysconf("SC_CLK_TCK")


def _find_task(name: str) -> str | None:
    """/proc/PID/task/TID of the host task named `name`."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as fh:
                    if fh.read().strip() == name:
                        return f"/proc/{pid}/task/{tid}"
            except OSError:
                continue
    return None


def _cpu_and_state(task: str) -> tuple[float, str]:
    """CPU seconds (user + system) the task has used, and its state letter (T: stopped)."""
    with open(f"{task}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK, fields[0]


def _container_cpu(session) -> float:
    """CPU seconds the host's cgroup of the session's container has used (gVisor's kernel included): under
    gVisor no task of the sandbox is a host task to find by name."""
    cid = session._worker.container.id
    for path in (f"/sys/fs/cgroup/cpu,cpuacct/docker/{cid}/cpuacct.usage", f"/sys/fs/cgroup/cpuacct/docker/{cid}/cpuacct.usage"):
        if os.path.exists(path):
            with open(path) as fh:
                return int(fh.read()) / 1e9
    with open(f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/cpu.stat") as fh:  # cgroup v2
        return int(fh.read().split("usage_usec ")[1].split()[0]) / 1e6


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_nothing_of_a_session_runs_between_cells(sb, route):
    name = "tg" + uuid.uuid4().hex[:12]
    with sb.session() as s:
        r = s.run(f"NAME = {name!r}\n" + ROUTES[route])
        assert r.status == "ok", r
        if under_gvisor(sb):  # the whole sandbox, gVisor's own kernel included, idles between cells
            before = _container_cpu(s)
            time.sleep(3)
            gap = _container_cpu(s) - before
            assert gap < 0.3, f"{gap:.2f} CPU-s ran in the sandbox between cells"
            r = s.run("print(kept)", limits=Limits(timeout_s=10))
            assert (r.status, r.stdout) == ("ok", "still here\n") and not s.state_lost
            return
        task = _find_task(name)
        assert task is not None, "the burning thread is not visible from the host"
        before, _ = _cpu_and_state(task)
        time.sleep(3)
        after, state = _cpu_and_state(task)
        gap = after - before
        print(f"{sb.backend} {route}: CPU the session used in a 3 s gap between cells: {gap:.2f} s "
              f"(state {state})")
        assert gap < 0.2, f"{gap:.2f} CPU-s ran between cells"
        assert state == "T"
        r = s.run("print(kept)", limits=Limits(timeout_s=10))  # the timer's handler runs first, in this cell
        assert (r.status, r.stdout) == ("ok", "still here\n") and not s.state_lost


# 3 CPU-s in all (a sandbox has one CPU: 3 s of wall clock at least)
_SPIN = "def spin(s):\n    t = time.thread_time()\n    while time.thread_time() - t < s:\n        pass\n"
OVER_CPU = {
    "interpreter": "spin(3)",
    "threads": ("ts = [threading.Thread(target=spin, args=(1.5,)) for _ in range(2)]\n"
                "for t in ts:\n    t.start()\nfor t in ts:\n    t.join()"),
    "child": ("pid = os.fork()\nif pid == 0:\n    spin(3)\n    os._exit(0)\nos.waitpid(pid, 0)"),
}


@pytest.mark.parametrize("where", sorted(OVER_CPU))
def test_a_cell_past_its_cpu_limit_is_stopped(sb, where):
    """The cell ignores SIGXCPU and returns after burning 3 CPU-s (in the interpreter, in two threads, or
    in a forked child), well within its wall-clock limit: its 1 CPU-s limit still stops it."""
    with sb.session() as s:
        s.run("x = 1")
        code = ("import os, signal, threading, time\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\n" + _SPIN
                + OVER_CPU[where] + "\nprint('returned')")
        r = s.run(code, limits=Limits(timeout_s=15, cpu_s=1))
        assert r.status == "timeout" and "returned" not in r.stdout, r
        assert s.state_lost
        assert s.run("print('fresh')").stdout == "fresh\n"


def test_a_running_cell_takes_a_slot_of_the_pool(sb):
    """With the pool's only slot taken by a call, a cell waits for it, as a call would."""
    with sb.session() as s:
        s.run("y = 5")
        worker = sb._pool.acquire(timeout=60)  # the slot, as a call in flight holds it
        try:
            with ThreadPoolExecutor(1) as ex:
                cell = ex.submit(s.run, "print(y)")
                time.sleep(1.0)
                waited = not cell.done()
                sb._pool.release(worker)
                worker = None
                assert cell.result(timeout=60).stdout == "5\n"
        finally:
            if worker is not None:
                sb._pool.release(worker)
        assert waited, "the cell ran while every slot of the pool was taken"


def test_thread_name_probe_is_real():
    """The probe itself: a thread of this process named through /proc is found, and burns CPU."""
    name = "tgself" + uuid.uuid4().hex[:8]
    stop = threading.Event()

    def burn() -> None:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as fh:
            fh.write(name)
        while not stop.is_set():
            pass

    t = threading.Thread(target=burn, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 5
        task = None
        while task is None and time.monotonic() < deadline:
            task = _find_task(name)
        assert task is not None
        a, state = _cpu_and_state(task)
        time.sleep(0.5)
        b, _ = _cpu_and_state(task)
        assert b > a and state in "RS"
    finally:
        stop.set()
        t.join()
