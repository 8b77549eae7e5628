"""Helpers shared by the red-team tests (tests/sandbox/test_attack_*.py, one file per surface attacked): judge
calls, micro-batches, the clean-sandbox check, and attack code that more than one surface uses.

Each attack test runs a real attack, built so that it WOULD succeed if the defence it targets were missing,
and asserts the secure outcome, with an honest control in the same sandbox so the test itself is sound.
Each test's docstring starts with its round and route id (``round 5, A01``): the red-team round (the files
were once test_attacks.py, _v2 ... _v8) and the route its write-up names, so `git log -S` finds its history.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import toolgym
from tests.sandbox.conftest import our_containers
from toolgym._assets.leetcode import SUPPORT
from toolgym.sandbox import Limits
from toolgym.sandbox.docker_backend import runtime_choice
from toolgym.sandbox.judging import TestCase, ajudge, judge

TL = 2.0
MEM = 256
RIGHT = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"
# the test side's ListNode: the one toolgym's LeetCode tests define (structural __eq__), which the test
# lists as data (`__by_value__`, as toolgym's LeetCode tests do): a class with methods is otherwise lent
LISTNODE = '__by_value__ = ("ListNode",)\n' + SUPPORT["ListNode"]
# the program side's ListNode, as a LeetCode starter defines it
PROGRAM_LISTNODE = '''
class ListNode:
    def __init__(self, val=0, next=None):
        self.val = val
        self.next = next
'''


def fn(sb, program: str, tests, **kw):
    kw.setdefault("time_limit_s", TL)
    kw.setdefault("memory_mb", MEM)
    return judge(sb, program, tests, mode="function", **kw)


def statuses(report) -> list[str]:
    return [v.status for v in report.verdicts]


def assert_no_ac(report, what: str = "") -> None:
    assert report.total > 0
    assert report.passed == 0, (what, report.verdicts)


def assert_all_ac(report, what: str = "") -> None:
    assert report.all_passed, (what, report.verdicts, report.notes)


# ------------------------------------------------------------------ moved from the round files
REPO = Path(toolgym.__file__).resolve().parents[2]


CALL = Limits(timeout_s=5, memory_mb=256, pids=64, output_bytes=256 << 10)


AB = "a, b = map(int, input().split())\nprint(a + b)\n"


AB_TESTS = [TestCase(input=f"{a} {b}\n", output=f"{a + b}\n") for a, b in ((1, 2), (5, 7), (100, 23))]


ADD_TESTS = [TestCase(call="add", args=[1, 2], expected=3)]


MANY_TESTS = [TestCase(call="add", args=[i, 2], expected=i + 2) for i in range(8)]


# ------------------------------------------------------------------------------------ helpers
def stdio(sb, program: str, tests, **kw):
    kw.setdefault("time_limit_s", TL)
    kw.setdefault("memory_mb", MEM)
    return judge(sb, program, tests, mode="stdio", **kw)


def stdio_job(sb, program: str, tests=AB_TESTS, **kw):
    return ajudge(sb, program, tests, mode="stdio", memory_mb=MEM, **kw)


CLEAN_LOOK = r'''
import os
me = os.getpid()
for p in sorted(int(x) for x in os.listdir("/proc") if x.isdigit()):
    if p in (1, me):
        continue
    try:
        st = dict(l.split(":", 1) for l in open(f"/proc/{p}/status").read().splitlines() if ":" in l)
        uid = int(st["Uid"].split()[0])  # root, or relative to ours: each sandbox has uids of its own
        print(p, "uid", "0" if uid == 0 else f"run{uid - os.getuid():+d}", "name", st["Name"].strip(),
              "ppid", st["PPid"].strip())
    except OSError as e:
        print(p, "unreadable", type(e).__name__)
print("done")
'''


# what stands in every sandbox beside the executor (PID 1): the call template (root) and the two
# cleaners (their own uids, the two below the evaluator's, which is one below the program's), all
# children of the executor, forked before it read any request
STANDING = {" uid 0 ", " uid run-2 ", " uid run-3 "}


def assert_clean(sb) -> None:
    """The next call works and sees no process but itself and what the sandbox holds from its start
    (the executor, PID 1, the call template and the two standing cleaners it forked before reading
    any request): what a call left behind is gone."""
    r = sb.run(CLEAN_LOOK, limits=CALL)
    assert r.status == "ok", r
    others = r.stdout.splitlines()[:-1]
    kinds = [next((u for u in STANDING if u in line and line.endswith(" ppid 1")), line) for line in others]
    assert r.stdout.endswith("done\n") and set(kinds) <= STANDING and len(set(kinds)) == len(kinds), \
        f"other processes visible in the next call:\n{r.stdout}"


async def gather_batch(sb, *coros):
    """Run `coros` (ajudge calls) as ONE micro-batch: the first ajudge on an idle one-worker
    sandbox goes alone, so a warm-up job goes first and the rest queue behind it. The jobs are one
    tenant's (the `one_tenant` fixture of tests/sandbox/conftest.py), so that jobs with the same tests may
    share the call."""
    warm = ajudge(sb, RIGHT, [TestCase(call="add", args=[1, 2], expected=3)], mode="function")
    reports = await asyncio.gather(warm, *coros)
    assert reports[0].all_passed, reports[0].verdicts
    return reports[1:]


async def gather_outcomes(sb, *coros):
    """`gather_batch` (one micro-batch after a warm-up job), each job's report or exception."""
    warm = ajudge(sb, RIGHT, ADD_TESTS[:1], mode="function")
    out = await asyncio.gather(warm, *coros, return_exceptions=True)
    assert not isinstance(out[0], BaseException) and out[0].all_passed, out[0]
    return out[1:]


MEMSCAN = r'''
import ctypes as _tg_ctypes, re as _tg_re


def _tg_regions(pid, rw_only):
    with open(f"/proc/{pid}/maps") as fh:
        for line in fh.read().splitlines():
            parts = line.split()
            if parts[1].startswith("rw" if rw_only else "r") and (len(parts) < 6 or parts[5] != "[vvar]"):
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                if hi - lo <= 1 << 28:
                    yield lo, hi


def _tg_memscan(pattern, pids=("self",), rw_only=True):
    # Every match of `pattern` in readable memory: this process's own through ctypes (a
    # non-dumpable process cannot open its own /proc/self/mem), others' through /proc/<pid>/mem.
    pat, hits = _tg_re.compile(pattern, _tg_re.S), []
    for pid in pids:
        own = pid == "self" or str(pid) == str(__import__("os").getpid())
        try:
            regions = list(_tg_regions(pid, rw_only))
            mem = None if own else open(f"/proc/{pid}/mem", "rb", 0)
        except OSError:
            continue
        try:
            for lo, hi in regions:
                pos = lo
                while pos < hi:
                    n = min(1 << 20, hi - pos)
                    try:
                        if own:
                            blob = _tg_ctypes.string_at(pos, n)
                        else:
                            mem.seek(pos)
                            blob = mem.read(n)
                    except (OSError, ValueError, OverflowError):
                        break
                    hits.extend(pat.finditer(blob))
                    if pos + n >= hi:
                        break
                    pos += n - 256
        finally:
            if mem is not None:
                mem.close()
    return hits
'''


ANCESTRY = r'''
import os, signal, time

def _ppid(pid):
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])

def _mine():
    out, p = set(), os.getpid()
    while p > 0 and p not in out:
        out.add(p)
        try:
            p = _ppid(p)
        except (OSError, ValueError, IndexError):
            break
    return out

def hit_batch_mates(sig, seconds):
    """Send `sig` to every process that is not this one, an ancestor, or a sibling of an
    ancestor (another job's zygote): that leaves other jobs' test processes."""
    mine = _mine()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        parent = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    parent[int(name)] = _ppid(int(name))
                except (OSError, ValueError, IndexError):
                    pass
        parents = set(parent.values())
        for pid, pp in parent.items():
            if pid in mine or pp in mine or pid in parents or pid == 1:
                continue
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        time.sleep(0.003)
'''


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


SORT_IN_PLACE = '''
class Solution:
    def sort_in_place(self, head):
        nodes = []
        while head:
            nodes.append(head)
            head = head.next
        for n, v in zip(nodes, sorted(n.val for n in nodes)):
            n.val = v
'''


class SandboxKiller:
    """FAULT INJECTION (a real one): kills sandboxes of this test process from the host, by killing their
    PID 1 (the executor). With a `marker`, the sandbox in which a process of that name (of its program uid)
    runs: it stands for a program that finds some way to make its sandbox fail, which no known route does
    any more. With marker=None, every sandbox of this process, all the time: an engine or host fault,
    which a control run sees too. Under gVisor (runsc) the executor and the programs live inside the
    sandbox's own kernel, which is no process of the host's: the killer reads each sandbox's processes with
    `runsc ps` and kills its kernel (the host's runsc-sandbox process), which ends the sandbox as a
    killed PID 1 does under runc."""

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

    def _gvisor_sandboxes(self) -> dict[str, tuple[int, str]]:
        """container id -> (host pid of its runsc-sandbox, runsc's --root), for this process's containers."""
        found = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/cmdline", "rb") as fh:
                    argv = fh.read().decode(errors="replace").split("\0")
            except OSError:
                continue
            if not argv or argv[0] != "runsc-sandbox":
                continue
            root = next((a.split("=", 1)[1] for a in argv if a.startswith("--root=")), "")
            ids = re.findall(r"/([0-9a-f]{64})(?:/|$)", " ".join(argv).replace(" ", "/ "))
            for cid in ids:
                if cid not in self._mine and cid not in self._foreign:
                    self._mine = set(our_containers())
                    if cid not in self._mine:
                        self._foreign.add(cid)
                if cid in self._mine:
                    found[cid] = (int(name), root)
        return found

    def _gvisor_marked(self, cid: str, root: str) -> bool:
        """Whether a process named `marker`, of a program's uid, runs in that sandbox (its own `ps`)."""
        out = subprocess.run(["runsc", "--root", root, "ps", cid], capture_output=True, text=True, timeout=10).stdout
        for row in out.splitlines()[1:]:
            cols = row.split()
            if len(cols) >= 8 and cols[-1] == self.marker and cols[0].isdigit() and int(cols[0]) >= 65534:
                return True
        return False

    def _watch_gvisor(self) -> None:
        for cid, (pid, root) in self._gvisor_sandboxes().items():
            if self.marker is None or self._gvisor_marked(cid, root):
                try:
                    os.kill(pid, signal.SIGKILL)
                    self.kills += 1
                    self.killed.set()
                except OSError:
                    pass

    def _watch(self) -> None:
        gvisor = (runtime_choice() or "").startswith("runsc")
        while not self._stop.is_set():
            if gvisor:
                self._watch_gvisor()
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
