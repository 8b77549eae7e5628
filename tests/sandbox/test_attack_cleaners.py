"""Red-team attacks on the standing cleaners (the processes that wipe a sandbox between jobs), on every
backend:
- round 4, R2: SIGSTOP the cleaner (it was stoppable between becoming uid 65534 and its kill(-1)), or lower
  its priority; now a cleaner's real and saved uids are its own (65532, 65531) and it is forked at start.
- round 6, B04/B05: rewrite a cleaner's custom time slice (``sched_setattr``) to carry a solver's answers to
  a copier; the cleaners' check now compares the whole ``sched_attr`` and the job that changes it pays.
How these tests are built, and their round ids: tests/sandbox/judging.py.
"""

from __future__ import annotations

import platform

import pytest

from tests.sandbox.conftest import under_gvisor
from tests.sandbox.judging import (
    AB_TESTS,
    ADD_TESTS,
    MANY_TESTS,
    MEM,
    RIGHT,
    STOP,
    STOP_WRONG,
    assert_all_ac,
    assert_clean,
    gather_batch,
    statuses,
)
from toolgym.sandbox import Limits
from toolgym.sandbox.judging import ajudge

# ================================================================ R2: stop the cleaner


@pytest.mark.slow
async def test_stopping_the_cleaner_fails_only_its_own_job(sb):
    """round 4, R2."""
    reports = await gather_batch(sb, ajudge(sb, RIGHT, ADD_TESTS, mode="function"),
                                 ajudge(sb, STOP_WRONG, MANY_TESTS, mode="function"),
                                 ajudge(sb, RIGHT, ADD_TESTS, mode="function"))
    # before: the harness hung on a stopped cleaner until the call's deadline ("no verdict" TLEs)
    assert statuses(reports[1]) == ["WA"] * len(MANY_TESTS) and reports[1].notes == [], \
        (reports[1].verdicts, reports[1].notes)
    for r in (reports[0], reports[2]):
        assert_all_ac(r, "a batch-mate of the cleaner stopper")
    assert_clean(sb)


@pytest.mark.slow
def test_stopping_the_cleaner_in_a_call_that_times_out_is_cleaned_up(sb):
    """round 4, R2."""
    before = sb.stats()["discarded"]
    r = sb.run(STOP + "_stoppers()\nprint('stopping', flush=True)\nwhile True:\n    pass\n",
               limits=Limits(timeout_s=2, memory_mb=256, pids=64, output_bytes=1 << 16))
    assert r.status == "timeout" and r.stdout == "stopping\n", r
    assert sb.stats()["discarded"] == before, sb.stats()
    assert_clean(sb)


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
    """round 4, R2."""
    right_but_lowering = LOWER_THE_CLEANER + "def add(a, b):\n    _lower()\n    return a + b\n"
    reports = await gather_batch(sb, ajudge(sb, RIGHT, ADD_TESTS, mode="function"),
                                 ajudge(sb, right_but_lowering, ADD_TESTS, mode="function"),
                                 ajudge(sb, RIGHT, ADD_TESTS, mode="function"))
    assert statuses(reports[1]) == ["RE"] and "cleaned" in reports[1].verdicts[0].message, reports[1].verdicts
    for r in (reports[0], reports[2]):
        assert_all_ac(r, "a batch-mate of the cleaner's tamperer")
    assert_clean(sb)

# sched_setattr / sched_getattr: the attack runs in the sandbox, on the host's architecture
SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}[platform.machine()]


SLICE = f'''
SET, GET = {SYSCALLS}
''' + r'''
import os, ctypes, errno, struct
libc = ctypes.CDLL(None, use_errno=True)
def cleaner():
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                st = open(f"/proc/{p}/status").read()
            except OSError:
                continue
            if any(l.startswith("Uid:") and int(l.split()[1]) == os.getuid() - 2 for l in st.splitlines()):
                return int(p)
def get(pid):
    buf = ctypes.create_string_buffer(56)
    libc.syscall(GET, pid, buf, 56, 0)
    return struct.unpack("IIQiIQQQII", buf.raw)[5]
def put(pid, v):
    attr = struct.pack("IIQiIQQQII", 56, 0, 0, 0, 0, v, 0, 0, 0, 0)
    return libc.syscall(SET, pid, ctypes.create_string_buffer(attr), 0)
BASE = 1 << 26
'''
SOLVER = SLICE + r'''
a, b = map(int, input().split())
ans = a + b
pid = cleaner()
v = get(pid)
slots = v - BASE if v & BASE else 0
i = bin(slots).count("1") and (slots.bit_length() + 7) // 8
put(pid, BASE + slots + ((ans & 0xFF) << (8 * i)))
print(ans)
'''
COPIER = SLICE + r'''
input()
pid = cleaner()
v = get(pid)
n_file = "/tmp/.i"
i = int(open(n_file).read()) if os.path.exists(n_file) else 0
open(n_file, "w").write(str(i + 1))
print(((v - BASE) >> (8 * i)) & 0xFF if v & BASE else 0)
'''


def _job(sb, program: str):
    return ajudge(sb, program, AB_TESTS, mode="stdio", memory_mb=MEM)


async def test_a_cleaners_time_slice_carries_nothing_to_a_later_job(sb):
    """round 6, B04/B05."""
    solver, copier = await gather_batch(sb, _job(sb, SOLVER), _job(sb, COPIER))
    if under_gvisor(sb):  # gVisor's kernel has no sched_setattr: the solver's write changes nothing, its own fault none
        r = sb.run(SLICE + "print(put(os.getpid(), BASE + 1), ctypes.get_errno() == errno.ENOSYS)\n",
                   limits=Limits(timeout_s=5))
        assert (r.status, r.stdout) == ("ok", "-1 True\n"), r
    else:
        assert not solver.all_passed, "changing a cleaner's scheduling is the job's own fault"
    assert "AC" not in statuses(copier), copier.verdicts
    (later,) = await gather_batch(sb, _job(sb, COPIER))
    assert "AC" not in statuses(later), later.verdicts
