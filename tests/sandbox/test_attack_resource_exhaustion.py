"""Red-team attacks that exhaust a shared resource so that someone else fails, on every backend: a full
/tmp (round 1), the pids cgroup filled with forking daemons (round 4, R1: the cleanup's fork failed and the
whole micro-batch got JudgeError), the sandbox's memory (round 5: an OOM kill stops the batch there), a
micro-batch over the 64 MiB a call carries (A04), a per-test memory limit above the sandbox's (A07). The
attacker's job fails; its batch-mates keep their verdicts.
How these tests are built, and their round ids: tests/sandbox/judging.py.
"""

from __future__ import annotations

import pytest

from tests.sandbox.conftest import LIMITS, under_gvisor
from tests.sandbox.judging import (
    AB,
    AB_TESTS,
    ADD_TESTS,
    CALL,
    FILL,
    FILL_WRONG,
    RIGHT,
    WRONG,
    assert_all_ac,
    assert_clean,
    assert_no_ac,
    gather_batch,
    gather_outcomes,
    statuses,
    stdio_job,
)
from toolgym.errors import ConfigError, InfrastructureError
from toolgym.sandbox.api import MAX_INPUT_BYTES
from toolgym.sandbox.judging import JudgeConfigError, TestCase, ajudge, judge

FILL_TMP = r'''
import os
i = 0
try:
    while True:
        with open(f"/tmp/fill{i}", "wb") as fh:
            for _ in range(15):
                fh.write(b"x" * (1 << 20))
        i += 1
except OSError:
    pass
'''
TMP_USER_FN = ("import os, time\ndef add(a, b):\n    time.sleep(0.4)  # some work first: the filler is done by then\n"
               "    p = f'/tmp/h{os.getpid()}'\n    with open(p, 'wb') as fh:\n"
               "        fh.write(b'y' * (1 << 20))\n    os.unlink(p)\n    return a + b\n")
TMP_USER_STDIO = ("import os\na, b = map(int, input().split())\np = f'/tmp/h{os.getpid()}'\n"
                  "with open(p, 'wb') as fh:\n    fh.write(b'y' * (1 << 20))\nos.unlink(p)\nprint(a + b)\n")


@pytest.mark.parametrize("mode", [pytest.param("function", marks=pytest.mark.slow), "stdio"])
async def test_a_full_tmp_does_not_fail_batch_mates(sb, mode):
    """round 1, route 5 (batch-mates)."""
    if mode == "function":
        tests, honest, attacker = ([TestCase(call="add", args=[1, 2], expected=3)], TMP_USER_FN,
                                   FILL_TMP + WRONG)
    else:
        tests, honest, attacker = ([TestCase(input="1 2\n", output="3\n")], TMP_USER_STDIO,
                                   FILL_TMP + "print(0)\n")
    solo = judge(sb, honest, tests, mode=mode)
    assert_all_ac(solo, "control alone")
    reports = await gather_batch(sb, ajudge(sb, attacker, tests, mode=mode),
                                 *[ajudge(sb, honest, tests, mode=mode) for _ in range(3)])
    assert_no_ac(reports[0])
    for r in reports[1:]:
        assert statuses(r) == statuses(solo), r.verdicts


# ================================================================ R1: fill the process table


@pytest.mark.slow
async def test_filling_the_process_table_fails_only_its_own_job(sb):
    """round 4, R1."""
    reports = await gather_batch(sb, ajudge(sb, RIGHT, ADD_TESTS, mode="function"),
                                 ajudge(sb, FILL_WRONG, ADD_TESTS, mode="function"),
                                 ajudge(sb, RIGHT, ADD_TESTS, mode="function"))
    assert statuses(reports[1]) == ["WA"] and reports[1].notes == [], (reports[1].verdicts, reports[1].notes)
    for r in (reports[0], reports[2]):
        assert_all_ac(r, "a batch-mate of the process-table filler")
    assert_clean(sb)


def test_filling_the_process_table_in_a_call_is_cleaned_up(sb):
    """round 4, R1."""
    before = sb.stats()["discarded"]
    r = sb.run(FILL + "_fill()\nprint('filled')\n", limits=CALL)
    assert r.status == "ok" and r.stdout == "filled\n", r
    assert sb.stats()["discarded"] == before, sb.stats()  # cleaned, so the sandbox was kept
    assert_clean(sb)


# ================================================================ OOM in a job: no further job runs there
OOM_HOG = r'''
import os, time
kids = []
for _ in range(8):  # each well inside its own address-space limit; together more than the sandbox has
    pid = os.fork()
    if pid == 0:
        b = bytes([1]) * (150 << 20)
        time.sleep(3)
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
print("done")
'''
# the sandbox's count of OOM kills: its memory cgroup's; under gVisor the executor's memory guard's
OOM_LOOK = "print(open({!r}).read().split('oom_kill ')[1].split()[0])\n"
OOM_COUNT = {False: "/sys/fs/cgroup/memory/memory.oom_control", True: "/dev/.toolgym-oom"}


@pytest.mark.slow
async def test_a_job_that_runs_its_sandbox_out_of_memory_is_the_last_there(sb):
    """round 5, OOM in a job."""
    hog, look = await gather_batch(sb, stdio_job(sb, OOM_HOG, [TestCase(input="", output="done\n")]),
                                   stdio_job(sb, OOM_LOOK.format(OOM_COUNT[under_gvisor(sb)]),
                                             [TestCase(input="", output="0\n")]))
    assert statuses(hog) == ["MLE"], (hog.verdicts, hog.notes)
    # the job after it ran on a sandbox where no OOM kill ever happened (before: the same one)
    assert_all_ac(look, "the batch-mate after an OOM kill")


# ================================================================ A04: a batch larger than a call carries
PAD = "#" * (1 << 20)


def big_tests(n: int) -> list[TestCase]:
    return [TestCase(input=f"{i} {i}\n{PAD}\n", output=f"{2 * i}\n") for i in range(n)]


@pytest.mark.slow
async def test_jobs_that_fit_alone_but_not_together_are_each_judged(sb):
    """round 5, A04."""
    half = big_tests((MAX_INPUT_BYTES >> 20) // 2 + 1)  # 33 MiB each: two do not fit one call
    a, b = await gather_batch(sb, stdio_job(sb, AB, half), stdio_job(sb, AB, half))
    for r in (a, b):
        assert_all_ac(r, "a correct program with big tests")


async def test_a_job_too_large_alone_fails_only_itself(sb):
    """round 5, A04."""
    too_big = big_tests((MAX_INPUT_BYTES >> 20) + 1)
    huge_program = "#" * MAX_INPUT_BYTES + "\n" + AB
    tests_too_big, right, program_too_big = await gather_outcomes(
        sb, stdio_job(sb, AB, too_big), stdio_job(sb, AB), stdio_job(sb, huge_program))
    # the task's tests: no program can do anything about it, so an infrastructure-like refusal (masked)
    assert isinstance(tests_too_big, JudgeConfigError) and isinstance(tests_too_big, InfrastructureError)
    assert "64 MiB" in str(tests_too_big), tests_too_big
    # the program's own size: its verdict, scored 0
    assert statuses(program_too_big) == ["RE"] * 3 and "too large" in program_too_big.verdicts[0].message
    assert_all_ac(right, "a batch-mate of the oversized jobs")


# ================================================================ A07: a memory limit the sandbox does not have
USES_200_MB = "b = bytes([1]) * (200 << 20)\n" + AB


def test_a_memory_limit_above_the_sandboxes_is_refused(sb):
    """round 5, A07."""
    over = LIMITS.memory_mb * 2
    with pytest.raises(JudgeConfigError) as err:  # before: MLE for a correct program using 200 MiB of 512
        judge(sb, USES_200_MB, AB_TESTS[:1], memory_mb=over)
    assert isinstance(err.value, ConfigError) and isinstance(err.value, InfrastructureError)
    assert f"memory_mb={over}" in str(err.value) and f"{LIMITS.memory_mb} MiB" in str(err.value), err.value
    r = judge(sb, USES_200_MB.replace("200", "160"), AB_TESTS[:1], memory_mb=LIMITS.memory_mb)
    assert_all_ac(r, "control: a limit the sandbox has")
