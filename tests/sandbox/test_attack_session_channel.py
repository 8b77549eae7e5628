"""Red-team attacks through a session (a stateful sandbox kept across cells), on every backend:
- round 4: a cell that fills the process table, stops the cleaner or whose child exits keeps its session.
- round 5, R03: a cell that writes part of a control frame, or stops reading its channel, stalled the
  executor; the executor now reads and writes the channel within the cell's deadline.
- round 5, R02: a session held its worker while the model sampled, and another episode waited and was
  masked; a held worker no longer counts against the pool's size.
How these tests are built, and their round ids: tests/sandbox/judging.py.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.sandbox.conftest import under_gvisor
from tests.sandbox.judging import CALL, FILL, STOP, SandboxKiller, assert_clean
from toolgym.sandbox import Limits
from toolgym.sandbox.api import SANDBOX_FAILED


@pytest.mark.parametrize("attack", ["fill the process table", "stop the cleaner"])
def test_a_session_cell_that_attacks_the_cleanup_keeps_its_session(sb, attack):
    """round 4, R2.

    A live session is spared by the cleanup (its interpreter stays, with its state); everything else of
    the uid goes, whatever the cell did."""
    cell = FILL + "_fill()\n" if attack == "fill the process table" else STOP + "_stoppers()\ntime.sleep(0.3)\n"
    before = sb.stats()["discarded"]
    with sb.session() as s:
        assert s.run("x = 41").status == "ok"
        # under gVisor's ptrace platform every refused fork of the filler is a trap into gVisor's kernel: the
        # cell's own processes slow it several times over, past 3 s, and the CPU gVisor reports for 74 spinning
        # processes ran past 31 s within 3.3 s of wall time (a 1-CPU sandbox): the cleanup is what is tested here
        r = s.run(cell + "print('attacked')", limits=Limits(timeout_s=30, cpu_s=600) if under_gvisor(sb) else None)
        assert (r.status, r.stdout, s.state_lost) == ("ok", "attacked\n", False), r
        r = s.run("print(x + 1)")
        assert (r.status, r.stdout, s.state_lost) == ("ok", "42\n", False), r
    assert sb.stats()["discarded"] == before, sb.stats()
    assert_clean(sb)


def test_a_cell_whose_child_exits_keeps_its_session(sb):
    """round 4, R2.

    A child the session's interpreter never waits for is a zombie: nothing runs, the sandbox is clean
    (it used to be "leftover processes", and the session's state was lost)."""
    with sb.session() as s:
        s.run("x = 41")
        r = s.run("import os\nif os.fork() == 0:\n    os._exit(0)\nprint('forked')")
        assert (r.status, r.stdout, s.state_lost) == ("ok", "forked\n", False), r
        assert s.run("print(x + 1)").stdout == "42\n"


# ================================================================ R03: a session's control channel
FRAME = "import json, os, struct\ndef _frame(obj):\n    b = json.dumps(obj).encode()\n    return struct.pack('>I', len(b)) + b\n"
CELLS = {
    "part of a frame": "import os, struct\nos.write(3, struct.pack('>I', 100))\nprint(1)\n",
    "a frame no cell could send": "import os\nos.write(3, b'\\xff\\xff\\xff\\xff')\nprint(1)\n",
    "a reply that is not a status": FRAME + "os.write(3, _frame({'rc': 'zero'}))\nimport time\ntime.sleep(30)\n",
}
SHORT = Limits(timeout_s=2, memory_mb=256, pids=64, output_bytes=1 << 16)


# part of a frame waits out the cell's deadline: the slow tier
@pytest.mark.parametrize("cell", [pytest.param(c, marks=pytest.mark.slow) if c == "part of a frame" else c for c in CELLS])
def test_a_cell_that_writes_on_the_control_channel_is_its_own_failure(sb, cell):
    """round 5, R03."""
    before = sb.stats()["discarded"]
    t0 = time.monotonic()
    with sb.session() as s:
        s.run("x = 41")
        r = s.run(CELLS[cell], limits=SHORT)
        # before: the executor blocked in a read, the host gave up on it (fault), twice, and the control run
        # waited for a worker the session held: SandboxUnavailable after minutes
        assert r.status in ("timeout", "killed", "error") and SANDBOX_FAILED not in r.stderr, r
        assert s.state_lost
        assert s.run("print(6 * 7)").stdout == "42\n"
    assert time.monotonic() - t0 < 30 + SHORT.timeout_s  # generous: the host's own deadline is 32 s
    assert sb.stats()["discarded"] == before, sb.stats()


@pytest.mark.slow
def test_a_cell_that_stops_reading_its_channel_cannot_stall_the_executor(sb):
    """round 5, R03."""
    before = sb.stats()["discarded"]
    with sb.session() as s:
        # the cell answers for itself and goes on sleeping: the interpreter reads no further cell
        r = s.run(FRAME + "os.write(3, _frame({'rc': 0}))\nimport time\ntime.sleep(60)\n", limits=SHORT)
        assert r.status == "ok", r
        t0 = time.monotonic()
        r = s.run("x = 1\n" + "#" * (4 << 20) + "\n", limits=SHORT)  # more than the channel buffers
        assert r.status == "timeout" and s.state_lost, r
        assert time.monotonic() - t0 < 30  # before: blocked in a write until the host's deadline, then a fault
        assert s.run("print(6 * 7)").stdout == "42\n"
    assert sb.stats()["discarded"] == before, sb.stats()


MARKED_CELL = "import ctypes, time\nctypes.CDLL(None).prctl(15, b'tgfault', 0, 0, 0)\ntime.sleep(5)\n"


def test_a_session_cell_whose_sandbox_fails_gets_its_own_verdict(sb):
    """round 5, R03.

    The control run that decides whose fault a failure is needs no worker of the pool (the session holds
    the only one here). FAULT INJECTION, a real one: the host kills the cell's sandbox (SandboxKiller)."""
    with sb.session() as s, SandboxKiller("tgfault") as killer:
        s.run("x = 1")
        r = s.run(MARKED_CELL, limits=CALL)
        assert killer.kills >= 2
        assert r.status == "killed" and SANDBOX_FAILED in r.stderr and s.state_lost, r
    with sb.session() as s:
        assert s.run("print(6 * 7)").stdout == "42\n"


# ================================================================ R02: sessions and the pool
def test_a_held_session_never_makes_another_call_wait(sb):
    """round 5, R02.

    The fixture's pool has one worker; a session holds it. Before: a call waited 300 s, then
    SandboxUnavailable (masked in training)."""
    out: dict[str, object] = {}

    def other() -> None:
        try:
            out["run"] = sb.run("print(6 * 7)", limits=CALL)
            with sb.session() as s2:
                out["session"] = s2.run("print(7 * 6)")
        except Exception as exc:  # noqa: BLE001 - reported below
            out["error"] = exc

    with sb.session() as s:
        s.run("x = 1")
        t = threading.Thread(target=other, daemon=True)
        t.start()
        t.join(150)  # generous: two sandboxes to start on a loaded machine
        assert not t.is_alive(), "a call waited for a worker a session held"
        assert s.run("print(x)").stdout == "1\n"
    assert "error" not in out, out
    assert out["run"].stdout == "42\n" and out["session"].stdout == "42\n", out
    deadline = time.monotonic() + 60
    while sb.stats()["live"] > 1 and time.monotonic() < deadline:  # back to its size once the sessions end
        time.sleep(0.2)
    assert sb.stats()["live"] == 1, sb.stats()
