"""Red-team attacks that turn a program's own failure into an infrastructure failure (masked in training)
or onto a batch-mate, on every backend (issue 25):
- round 4, R3: a sandbox that fails mid-batch: the other jobs are judged again alone, the job that made it
  fail gets a verdict, and only a fault seen on the control run too is an infrastructure failure.
- round 4, R4: checker="float" on a value no float can hold crashed the harness.
- round 4: a job's own time excludes its batch-mates'; round 5, A08: the wipe after a job is its own.
- round 5: a lone surrogate in a program's text is that program's verdict, not a harness crash.
How these tests are built, and their round ids: tests/sandbox/judging.py.
"""

from __future__ import annotations

import pytest

from tests.sandbox.conftest import backends
from tests.sandbox.judging import (
    AB,
    AB_TESTS,
    ADD_TESTS,
    CALL,
    RIGHT,
    TL,
    SandboxKiller,
    assert_all_ac,
    assert_clean,
    fn,
    gather_batch,
    statuses,
    stdio_job,
)
from toolgym.errors import InfrastructureError
from toolgym.sandbox.judging import TestCase, ajudge, judge

# ================================================================ R3: a sandbox that fails mid-batch


MARKED = "import ctypes, time\nctypes.CDLL(None).prctl(15, b'tgfault', 0, 0, 0)\ntime.sleep(5)\n"


@backends(slow_on=("docker",))
async def test_a_sandbox_that_fails_mid_batch_fails_only_the_job_that_made_it_fail(sb):
    """round 4, R3."""
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
    """round 4, R3."""
    with SandboxKiller("tgfault") as killer:
        r = sb.run(MARKED + "print('never')\n", limits=CALL)
    assert killer.kills >= 1
    assert r.status == "killed" and "sandbox" in r.stderr, r
    assert sb.run("print(6 * 7)", limits=CALL).stdout == "42\n"


@pytest.mark.slow
@pytest.mark.parametrize("call", ["judge", "run"])
def test_a_fault_seen_on_the_control_run_too_is_an_infrastructure_failure(sb, call):
    """round 4, R3."""
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
    """round 4, R4."""
    r = fn(sb, f"def f():\n    return {value}\n", [TestCase(call="f", expected=[1.5] if "[" in value else 1.5),
                                                    TestCase(call="f", expected=1.5)], checker="float")
    assert statuses(r) == ["WA", "WA"] and r.notes == [], (r.verdicts, r.notes)
    ok = fn(sb, "def f():\n    return 1.5000000001\n", [TestCase(call="f", expected=1.5)], checker="float")
    assert_all_ac(ok, "control: a close float")


def test_float_checker_in_stdio_on_a_huge_token_gives_a_verdict(sb):
    """round 4, R4."""
    huge = "9" * 400
    r = judge(sb, f"print('{huge}')\n", [TestCase(input="", output="1.5\n")], mode="stdio", checker="float")
    assert statuses(r) == ["WA"] and r.notes == [], (r.verdicts, r.notes)
    same = judge(sb, f"print('{huge}')\n", [TestCase(input="", output=huge + "\n")], mode="stdio", checker="float")
    assert_all_ac(same, "control: the same huge token")


async def test_a_value_the_checker_cannot_hold_fails_only_its_own_job(sb):
    """round 4, R4."""
    tests = [TestCase(call="f", expected=1.5)]
    right = "def f():\n    return 1.5\n"
    reports = await gather_batch(sb, ajudge(sb, right, tests, mode="function", checker="float"),
                                 ajudge(sb, "def f():\n    return 10 ** 400\n", tests, mode="function", checker="float"),
                                 ajudge(sb, right, tests, mode="function", checker="float"))
    assert statuses(reports[1]) == ["WA"] and reports[1].notes == []
    for r in (reports[0], reports[2]):
        assert_all_ac(r, "a batch-mate of the huge value")


# ================================================================ wait time is reported
@pytest.mark.slow
async def test_a_jobs_own_time_excludes_its_batch_mates(sb):
    """round 4, wait time is reported."""
    slow = "import time\ndef add(a, b):\n    time.sleep(1.0)\n    return a + b\n"
    reports = await gather_batch(sb, *[ajudge(sb, slow, ADD_TESTS, mode="function") for _ in range(3)],
                                 ajudge(sb, RIGHT, ADD_TESTS, mode="function"))
    assert all(r.all_passed for r in reports)
    # each slow job slept 1 s in its own test; the fast one waited for all three, and none of that is its own
    assert all(r.own_s >= 1.0 for r in reports[:3]) and reports[3].own_s < reports[0].own_s, \
        [r.own_s for r in reports]
    assert reports[3].duration_s - reports[3].own_s >= 3.0, (reports[3].duration_s, reports[3].own_s)


DEEP = r'''
import os, time
for where in ("/work", "/tmp"):
    try:
        os.chdir(where)
        os.mkdir("deep%d" % os.getpid())
        break
    except OSError:
        continue
os.chdir("deep%d" % os.getpid())
end = time.monotonic() + 0.8
while time.monotonic() < end:
    for _ in range(200):
        os.mkdir("a")
        os.chdir("a")
print(-1)
'''


@pytest.mark.slow
async def test_the_wipe_after_a_job_is_charged_to_that_job(sb):
    """round 5, A02/A05/A08."""
    deep, honest = await gather_batch(sb, stdio_job(sb, DEEP, AB_TESTS[:1]), stdio_job(sb, AB, AB_TESTS[:1]))
    assert_all_ac(honest, "the deep-tree builder's batch-mate")
    # before: the executor wiped the tree after the harness had reported, charged to no job (most of the call)
    uncharged = deep.duration_s - deep.own_s - honest.own_s
    assert uncharged < deep.own_s, (deep.duration_s, deep.own_s, honest.own_s)
    assert_clean(sb)


# ================================================================ text no encoder takes
async def test_a_lone_surrogate_in_a_program_is_its_verdict(sb):
    """round 5, text no encoder takes."""
    stdio_bad = "s = '\ud800'\n" + AB
    fn_bad = "s = '\ud800'\n" + RIGHT
    r1, r2, mate = await gather_batch(sb, stdio_job(sb, stdio_bad),
                                      ajudge(sb, fn_bad, ADD_TESTS, mode="function"), stdio_job(sb, AB))
    for r in (r1, r2):
        assert r.notes == [] and set(statuses(r)) <= {"RE", "AC"}, (r.verdicts, r.notes)  # no harness crash
    assert statuses(r1) == ["RE"] * 3 and "SyntaxError" in r1.verdicts[0].message, r1.verdicts
    assert_all_ac(mate, "a batch-mate of the surrogate")
