"""Red-team attacks, round 6 (issue 25, the red team that read round 2's code). Each route was first run
against the tree before its fix, where it failed, on both backends.

- B04/B05 a program rewrote the custom time slice of its uid's standing cleaner (``sched_setattr``: the
  cleaner's effective uid is the program's, so the kernel allows it). The cleaners' check compared nice,
  policy and CPUs only, so the change went unseen, stayed for later jobs and calls, and carried a solver's
  answers to a copier judged after it (AC for a program that computes nothing). The check now compares the
  whole ``sched_attr``: the job that changes it pays (not AC), the sandbox is replaced, and the jobs after it
  are judged on a fresh one.
"""

from __future__ import annotations

import platform

from tests.sandbox.judging import MEM, statuses
from tests.sandbox.test_attacks import gather_batch
from toolgym.sandbox.judging import TestCase, ajudge

# sched_setattr / sched_getattr: the attack runs in the sandbox, on the host's architecture
SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}[platform.machine()]

AB_TESTS = [TestCase(input=f"{a} {b}\n", output=f"{a + b}\n") for a, b in ((1, 2), (5, 7), (100, 23))]

SLICE = f'''
SET, GET = {SYSCALLS}
''' + r'''
import os, ctypes, struct
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
    solver, copier = await gather_batch(sb, _job(sb, SOLVER), _job(sb, COPIER))
    assert not solver.all_passed, "changing a cleaner's scheduling is the job's own fault"
    assert "AC" not in statuses(copier), copier.verdicts
    (later,) = await gather_batch(sb, _job(sb, COPIER))
    assert "AC" not in statuses(later), later.verdicts
