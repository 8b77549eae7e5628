"""Red-team attacks by signals, on every backend: a program signalling its batch-mates' test processes
(round 1, route 5) or any process that is not its own (round 4) changes no one's verdict.
How these tests are built, and their round ids: tests/sandbox/judging.py.
"""

from __future__ import annotations

import pytest

from tests.sandbox.judging import (
    ANCESTRY,
    CALL,
    WRONG,
    assert_all_ac,
    assert_no_ac,
    fn,
    gather_batch,
    statuses,
)
from toolgym.sandbox.judging import TestCase, ajudge

# =========================================================================== 5. batch-mates
SLOW_RIGHT = "import time\ndef add(a, b):\n    time.sleep(0.15)\n    return a + b\n"
SIGNALLERS = {
    "SIGINT to batch-mates' test processes": ANCESTRY + "hit_batch_mates(signal.SIGINT, 1.5)\n" + WRONG,
    "SIGKILL to batch-mates' test processes": ANCESTRY + "hit_batch_mates(signal.SIGKILL, 1.5)\n" + WRONG,
    "SIGSTOP to batch-mates' test processes": ANCESTRY + "hit_batch_mates(signal.SIGSTOP, 1.0)\n" + WRONG,
    "os.kill(-1, SIGINT)": "import os, signal, time\nfor _ in range(50):\n    os.kill(-1, signal.SIGINT)\n"
                          "    time.sleep(0.01)\n" + WRONG,
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SIGNALLERS))
async def test_signals_cannot_change_a_batch_mates_verdict(sb, name):
    """round 1, route 5 (batch-mates)."""
    tests = [TestCase(code="assert add(1, 2) == 3"), TestCase(call="add", args=[2, 3], expected=5),
             TestCase(code="assert add(-1, 1) == 0")]
    solo = fn(sb, SLOW_RIGHT, tests)
    assert_all_ac(solo, "control alone")
    reports = await gather_batch(
        sb, ajudge(sb, SLOW_RIGHT, tests, mode="function"),
        ajudge(sb, SIGNALLERS[name], tests, mode="function", time_limit_s=3.0),
        ajudge(sb, SLOW_RIGHT, tests, mode="function"), ajudge(sb, SLOW_RIGHT, tests, mode="function"))
    assert_no_ac(reports[1], name)
    for i in (0, 2, 3):
        assert statuses(reports[i]) == statuses(solo), (name, i, reports[i].verdicts)


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
    """round 4, R2.

    The standing cleaners are there during every call (uids 65532/65531 of their own), and no
    program can signal them, or anything else in the sandbox."""
    r = sb.run(SIGNAL_EVERYONE, limits=CALL)
    assert r.status == "ok" and r.stdout.endswith("done\n"), r
    assert r.stdout == "done\n", r.stdout
    seen = sb.run("import os\nprint(sorted({int(open(f'/proc/{p}/status').read().split('Uid:')[1].split()[0]) "
                  "for p in os.listdir('/proc') if p.isdigit()}), os.getuid())\n", limits=CALL)
    uids, own = seen.stdout.rsplit(" ", 1)
    run = int(own)  # each sandbox has uids of its own: the cleaners' are the two below the evaluator's
    assert uids == str([0, run - 3, run - 2, run]), seen
