"""Red-team attacks, round 4: reward integrity. A program must not turn its own failure into an
infrastructure failure (masked in training) nor make a batch-mate fail, on every backend.

Routes (issue 25), each reproduced against the tree before the fix, where it failed:
- R1 fill the pids cgroup with detached processes that keep forking: the cleanup forked a cleaner,
  the fork failed (EAGAIN), the harness crashed or the executor answered "executor error", and
  every job of the micro-batch got JudgeError. Now the cleaners stand: forked when the sandbox
  starts, no fork at cleanup.
- R2 SIGSTOP the cleaner: the cleaner became uid 65534 before its kill(-1), so a process of that
  uid could stop it; the harness (or the executor) then waited until its deadline. Now a cleaner's
  real and saved uids are its own (65532, 65531): no program can signal it.
- R3 a sandbox that fails in the middle of a micro-batch: the other jobs are judged again alone, the
  job that makes its sandbox fail alone gets a verdict (its own fault, shown by a control run that
  works), and only a fault seen on the control run too is an infrastructure failure (raised).
- R4 checker="float" on a value no float can hold: the harness crashed (OverflowError).
- R5 the harness reports a job that left the sandbox unclean: that job fails, nobody else.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time

import pytest

from tests.sandbox.conftest import our_containers
from tests.sandbox.judging import RIGHT, TL, assert_all_ac, fn, statuses
from tests.sandbox.test_attacks import CALL, assert_clean, gather_batch
from toolgym.errors import InfrastructureError
from toolgym.sandbox import Limits
from toolgym.sandbox.judging import TestCase, ajudge, judge

ADD_TESTS = [TestCase(call="add", args=[1, 2], expected=3)]
MANY_TESTS = [TestCase(call="add", args=[i, 2], expected=i + 2) for i in range(8)]

# ================================================================ R1: fill the process table
FILL = r'''
import os, time

def _fill():
    """Detached processes that fork until the pids cgroup is full, and keep grabbing each free slot."""
    if os.fork() == 0:
        os.setsid()
        for fd in (0, 1, 2):
            os.close(fd)
        end = time.monotonic() + 60
        while time.monotonic() < end:
            try:
                os.fork()
            except OSError:
                pass
        os._exit(0)
    time.sleep(0.5)
'''
FILL_WRONG = FILL + "def add(a, b):\n    _fill()\n    return a - b\n"


async def test_filling_the_process_table_fails_only_its_own_job(sb):
    reports = await gather_batch(sb, ajudge(sb, RIGHT, ADD_TESTS, mode="function"),
                                 ajudge(sb, FILL_WRONG, ADD_TESTS, mode="function"),
                                 ajudge(sb, RIGHT, ADD_TESTS, mode="function"))
    assert statuses(reports[1]) == ["WA"] and reports[1].notes == [], (reports[1].verdicts, reports[1].notes)
    for r in (reports[0], reports[2]):
        assert_all_ac(r, "a batch-mate of the process-table filler")
    assert_clean(sb)


def test_filling_the_process_table_in_a_call_is_cleaned_up(sb):
    before = sb.stats()["discarded"]
    r = sb.run(FILL + "_fill()\nprint('filled')\n", limits=CALL)
    assert r.status == "ok" and r.stdout == "filled\n", r
    assert sb.stats()["discarded"] == before, sb.stats()  # cleaned, so the sandbox was kept
    assert_clean(sb)


# ================================================================ R2: stop the cleaner
# Stoppers send SIGSTOP, in a tight loop, to the next pids the sandbox will hand out: the cleaner
# forked after the test gets one of them, and used to be stoppable from the moment it became uid
# 65534 until its kill(-1).
STOP = r'''
import os, signal, time

def _spin(r):
    top = int(os.read(r, 16))
    front = top
    end = time.monotonic() + 120
    while time.monotonic() < end:
        for pid in range(top + 1, front + 12):
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                continue
            except PermissionError:
                pass
            front = max(front, pid)
    os._exit(0)

def _stoppers(n=8):
    if os.fork() == 0:
        for fd in (0, 1, 2):
            os.close(fd)
        os.setsid()
        r, w = os.pipe()
        pids = []
        for _ in range(n):
            pid = os.fork()
            if pid == 0:
                os.close(w)
                _spin(r)
            pids.append(pid)
        for _ in pids:
            os.write(w, b"%16d" % max(pids))
        os._exit(0)
'''
STOP_WRONG = STOP + "def add(a, b):\n    _stoppers()\n    time.sleep(0.3)\n    return a - b\n"


async def test_stopping_the_cleaner_fails_only_its_own_job(sb):
    reports = await gather_batch(sb, ajudge(sb, RIGHT, ADD_TESTS, mode="function"),
                                 ajudge(sb, STOP_WRONG, MANY_TESTS, mode="function"),
                                 ajudge(sb, RIGHT, ADD_TESTS, mode="function"))
    # before: the harness hung on a stopped cleaner until the call's deadline ("no verdict" TLEs)
    assert statuses(reports[1]) == ["WA"] * len(MANY_TESTS) and reports[1].notes == [], \
        (reports[1].verdicts, reports[1].notes)
    for r in (reports[0], reports[2]):
        assert_all_ac(r, "a batch-mate of the cleaner stopper")
    assert_clean(sb)


def test_stopping_the_cleaner_in_a_call_that_times_out_is_cleaned_up(sb):
    before = sb.stats()["discarded"]
    r = sb.run(STOP + "_stoppers()\nprint('stopping', flush=True)\nwhile True:\n    pass\n",
               limits=Limits(timeout_s=2, memory_mb=256, pids=64, output_bytes=1 << 16))
    assert r.status == "timeout" and r.stdout == "stopping\n", r
    assert sb.stats()["discarded"] == before, sb.stats()
    assert_clean(sb)


@pytest.mark.parametrize("attack", ["fill the process table", "stop the cleaner"])
def test_a_session_cell_that_attacks_the_cleanup_keeps_its_session(sb, attack):
    """A live session is spared by the cleanup (its interpreter stays, with its state); everything else of
    the uid goes, whatever the cell did."""
    cell = FILL + "_fill()\n" if attack == "fill the process table" else STOP + "_stoppers()\ntime.sleep(0.3)\n"
    before = sb.stats()["discarded"]
    with sb.session() as s:
        assert s.run("x = 41").status == "ok"
        r = s.run(cell + "print('attacked')")
        assert (r.status, r.stdout, s.state_lost) == ("ok", "attacked\n", False), r
        r = s.run("print(x + 1)")
        assert (r.status, r.stdout, s.state_lost) == ("ok", "42\n", False), r
    assert sb.stats()["discarded"] == before, sb.stats()
    assert_clean(sb)


def test_a_cell_whose_child_exits_keeps_its_session(sb):
    """A child the session's interpreter never waits for is a zombie: nothing runs, the sandbox is clean
    (it used to be "leftover processes", and the session's state was lost)."""
    with sb.session() as s:
        s.run("x = 41")
        r = s.run("import os\nif os.fork() == 0:\n    os._exit(0)\nprint('forked')")
        assert (r.status, r.stdout, s.state_lost) == ("ok", "forked\n", False), r
        assert s.run("print(x + 1)").stdout == "42\n"


LOWER_THE_CLEANER = r'''
import os
def _lower():
    for p in os.listdir("/proc"):
        try:
            uid = open(f"/proc/{p}/status").read().split("Uid:")[1].split()[0]
        except (OSError, IndexError):
            continue
        if int(uid) in (os.getuid() - 2, os.getuid() - 3):  # a cleaner: its effective uid is ours, so this is allowed
            try:
                os.setpriority(os.PRIO_PROCESS, int(p), 19)
            except OSError:
                pass
'''


async def test_lowering_a_cleaners_priority_fails_only_its_own_job(sb):
    right_but_lowering = LOWER_THE_CLEANER + "def add(a, b):\n    _lower()\n    return a + b\n"
    reports = await gather_batch(sb, ajudge(sb, RIGHT, ADD_TESTS, mode="function"),
                                 ajudge(sb, right_but_lowering, ADD_TESTS, mode="function"),
                                 ajudge(sb, RIGHT, ADD_TESTS, mode="function"))
    assert statuses(reports[1]) == ["RE"] and "cleaned" in reports[1].verdicts[0].message, reports[1].verdicts
    for r in (reports[0], reports[2]):
        assert_all_ac(r, "a batch-mate of the cleaner's tamperer")
    assert_clean(sb)


SIGNAL_EVERYONE = r'''
import os, signal
me = os.getpid()
for p in sorted(int(x) for x in os.listdir("/proc") if x.isdigit()):
    if p == me:
        continue
    try:
        uid = int(open(f"/proc/{p}/status").read().split("Uid:")[1].split()[0])
    except (OSError, IndexError, ValueError):
        continue
    for sig in (signal.SIGSTOP, signal.SIGCONT, 0):
        try:
            os.kill(p, sig)
            print("signalled", p, "uid", uid, sig)
        except PermissionError:
            pass
print("done")
'''


def test_no_process_but_the_programs_own_can_be_signalled(sb):
    """The standing cleaners are there during every call (uids 65532/65531 of their own), and no
    program can signal them, or anything else in the sandbox."""
    r = sb.run(SIGNAL_EVERYONE, limits=CALL)
    assert r.status == "ok" and r.stdout.endswith("done\n"), r
    assert r.stdout == "done\n", r.stdout
    seen = sb.run("import os\nprint(sorted({int(open(f'/proc/{p}/status').read().split('Uid:')[1].split()[0]) "
                  "for p in os.listdir('/proc') if p.isdigit()}), os.getuid())\n", limits=CALL)
    uids, own = seen.stdout.rsplit(" ", 1)
    run = int(own)  # each sandbox has uids of its own: the cleaners' are the two below the evaluator's
    assert uids == str([0, run - 3, run - 2, run]), seen


# ================================================================ R3: a sandbox that fails mid-batch
class SandboxKiller:
    """FAULT INJECTION (a real one): kills sandboxes of this test process from the host, by killing their
    PID 1 (the executor). With a `marker`, the sandbox in which a process of that name (of its program uid)
    runs: it stands for a program that finds some way to make its sandbox fail, which no known route does
    any more. With marker=None, every sandbox of this process, all the time: an engine or host fault,
    which a control run sees too."""

    def __init__(self, marker: str | None) -> None:
        self.marker, self.kills = marker, 0
        self._mine: set[str] = set()  # ids of this process's containers
        self._foreign: set[str] = set()
        self._stop = threading.Event()
        self.killed = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> SandboxKiller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    @staticmethod
    def _status(pid: int) -> dict[str, str]:
        try:
            with open(f"/proc/{pid}/status") as fh:
                return dict(line.rstrip("\n").split(":\t", 1) for line in fh if ":\t" in line)
        except OSError:
            return {}

    def _ours(self, pid: int) -> bool:
        """In a sandbox of this test process (never another run's, on a shared machine)."""
        try:
            with open(f"/proc/{pid}/cgroup") as fh:
                groups = fh.read()
        except OSError:
            return False
        if f"/toolgym/{os.getpid()}-" in groups:
            return True
        found = re.search(r"docker[-/]([0-9a-f]{64})", groups)
        if found is None:
            return False
        cid = found.group(1)
        if cid not in self._mine and cid not in self._foreign:  # a container we have not seen yet
            self._mine = set(our_containers())
            if cid not in self._mine:
                self._foreign.add(cid)
        return cid in self._mine

    def _target(self, pid: int, st: dict[str, str]) -> int | None:
        """The sandbox init to kill for process `pid`, if any."""
        nspid = st.get("NSpid", "").split()
        if self.marker is None:
            return pid if len(nspid) > 1 and nspid[-1] == "1" and self._ours(pid) else None
        uid = int((st.get("Uid") or "0").split()[0])  # a sandbox's program: an unprivileged uid of its own
        if st.get("Name") != self.marker or uid < 65534 or not self._ours(pid):
            return None
        while pid > 1:  # up to the init of its PID namespace
            st = self._status(pid)
            if not st:
                return None
            if st.get("NSpid", "").split()[-1:] == ["1"]:
                return pid
            pid = int(st.get("PPid", "0"))
        return None

    def _watch(self) -> None:
        while not self._stop.is_set():
            for name in os.listdir("/proc"):
                if not name.isdigit():
                    continue
                init = self._target(int(name), self._status(int(name)))
                if init is not None:
                    try:
                        os.kill(init, signal.SIGKILL)
                        self.kills += 1
                        self.killed.set()
                    except OSError:
                        pass
            time.sleep(0.005)


MARKED = "import ctypes, time\nctypes.CDLL(None).prctl(15, b'tgfault', 0, 0, 0)\ntime.sleep(5)\n"


async def test_a_sandbox_that_fails_mid_batch_fails_only_the_job_that_made_it_fail(sb):
    with SandboxKiller("tgfault") as killer:
        reports = await gather_batch(sb, ajudge(sb, RIGHT, ADD_TESTS, mode="function"),
                                     ajudge(sb, MARKED + RIGHT, ADD_TESTS, mode="function"),
                                     ajudge(sb, RIGHT, ADD_TESTS, mode="function"))
    assert killer.kills >= 2  # in the batch, then judged alone
    assert statuses(reports[1]) == ["RE"] and "sandbox" in reports[1].verdicts[0].message, reports[1].verdicts
    for r in (reports[0], reports[2]):
        assert_all_ac(r, "a batch-mate of the job whose sandbox failed")
    assert_all_ac(fn(sb, RIGHT, ADD_TESTS), "the sandbox works again")


def test_a_call_whose_sandbox_fails_gets_its_own_verdict(sb):
    with SandboxKiller("tgfault") as killer:
        r = sb.run(MARKED + "print('never')\n", limits=CALL)
    assert killer.kills >= 1
    assert r.status == "killed" and "sandbox" in r.stderr, r
    assert sb.run("print(6 * 7)", limits=CALL).stdout == "42\n"


@pytest.mark.parametrize("call", ["judge", "run"])
def test_a_fault_seen_on_the_control_run_too_is_an_infrastructure_failure(sb, call):
    sb.wait_ready(120)
    with SandboxKiller(None) as killer, pytest.raises(InfrastructureError):
        assert killer.killed.wait(60)  # the pool's sandbox is dead, and every new one dies
        if call == "judge":
            judge(sb, RIGHT, ADD_TESTS, mode="function", time_limit_s=TL)
        else:
            sb.run("print(1)", limits=CALL)
    sb.wait_ready(120)
    assert_all_ac(fn(sb, RIGHT, ADD_TESTS), "the sandbox works again once the fault is gone")


# ================================================================ R4: values no checker can hold
@pytest.mark.parametrize("value", ["10 ** 400", "-(10 ** 400)", "[1.5, 10 ** 400]", "{'a': 10 ** 400}"])
def test_float_checker_on_a_value_no_float_holds_gives_a_verdict(sb, value):
    r = fn(sb, f"def f():\n    return {value}\n", [TestCase(call="f", expected=[1.5] if "[" in value else 1.5),
                                                    TestCase(call="f", expected=1.5)], checker="float")
    assert statuses(r) == ["WA", "WA"] and r.notes == [], (r.verdicts, r.notes)
    ok = fn(sb, "def f():\n    return 1.5000000001\n", [TestCase(call="f", expected=1.5)], checker="float")
    assert_all_ac(ok, "control: a close float")


def test_float_checker_in_stdio_on_a_huge_token_gives_a_verdict(sb):
    huge = "9" * 400
    r = judge(sb, f"print('{huge}')\n", [TestCase(input="", output="1.5\n")], mode="stdio", checker="float")
    assert statuses(r) == ["WA"] and r.notes == [], (r.verdicts, r.notes)
    same = judge(sb, f"print('{huge}')\n", [TestCase(input="", output=huge + "\n")], mode="stdio", checker="float")
    assert_all_ac(same, "control: the same huge token")


async def test_a_value_the_checker_cannot_hold_fails_only_its_own_job(sb):
    tests = [TestCase(call="f", expected=1.5)]
    right = "def f():\n    return 1.5\n"
    reports = await gather_batch(sb, ajudge(sb, right, tests, mode="function", checker="float"),
                                 ajudge(sb, "def f():\n    return 10 ** 400\n", tests, mode="function", checker="float"),
                                 ajudge(sb, right, tests, mode="function", checker="float"))
    assert statuses(reports[1]) == ["WA"] and reports[1].notes == []
    for r in (reports[0], reports[2]):
        assert_all_ac(r, "a batch-mate of the huge value")


# ================================================================ wait time is reported
async def test_a_jobs_own_time_excludes_its_batch_mates(sb):
    slow = "import time\ndef add(a, b):\n    time.sleep(1.0)\n    return a + b\n"
    reports = await gather_batch(sb, *[ajudge(sb, slow, ADD_TESTS, mode="function") for _ in range(3)],
                                 ajudge(sb, RIGHT, ADD_TESTS, mode="function"))
    assert all(r.all_passed for r in reports)
    # each slow job slept 1 s in its own test; the fast one waited for all three, and none of that is its own
    assert all(r.own_s >= 1.0 for r in reports[:3]) and reports[3].own_s < reports[0].own_s, \
        [r.own_s for r in reports]
    assert reports[3].duration_s - reports[3].own_s >= 3.0, (reports[3].duration_s, reports[3].own_s)
