"""Red-team attacks, round 5: reward integrity, second red team (issue 25). Each route was first run
against the tree before its fix (707acd8), where it failed, on both backends: all 32 tests (16 x local,
docker) failed there, the session ones after 300 s waits for a worker.

- A01 SysV IPC objects whose owner a program set to uid 0 (IPC_SET) survived the per-job cleanup, which
  looked for objects by owner: they kept the sandbox's memory full and a batch-mate got MLE. Objects are
  now removed by creator (which IPC_SET cannot change), and a job after which any is left is the one that
  pays; the sandbox's memory is checked per job too (an OOM kill in a job stops the batch there).
- A02/A05 the work root (/work, mode 1777) was not wiped between the jobs of one judge call: a wrong
  program copied a solver batch-mate's answers (AC). No untrusted uid can write there any more; everything
  a job can write is wiped before the next job, and that wipe is charged to the job (A08).
- A04 a micro-batch over the 64 MiB a call carries failed every job in it: batches are packed to fit, and
  a job that does not fit alone gets an outcome of its own (the task's tests: a JudgeConfigError; the
  program: RE), which reaches no batch-mate.
- A07 a per-test memory limit above the sandbox's own: a correct program got MLE for memory the sandbox
  never had. Refused (JudgeConfigError naming both) instead.
- A lone surrogate in a program's text crashed the harness: now it is the program's verdict.
- R03 a session cell that writes part of a control frame stalled the executor (a blocking read); the
  control run that decides whose fault a failure is could not get a worker while the session held it.
  The executor reads and writes the session's channel within the cell's deadline; the control run uses a
  sandbox of its own.
- R02 a session held its worker while the model sampled, and another episode waited 300 s and was masked:
  a worker held by a session no longer counts against the pool's size (the pool starts another).
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tests.sandbox.conftest import LIMITS
from tests.sandbox.judging import MEM, RIGHT, assert_all_ac, statuses
from tests.sandbox.test_attacks import CALL, assert_clean, gather_batch
from tests.sandbox.test_attacks_v4 import SandboxKiller
from toolgym.errors import ConfigError, InfrastructureError
from toolgym.sandbox import Limits
from toolgym.sandbox.api import MAX_INPUT_BYTES, SANDBOX_FAILED
from toolgym.sandbox.judging import JudgeConfigError, TestCase, ajudge, judge

AB_TESTS = [TestCase(input=f"{a} {b}\n", output=f"{a + b}\n") for a, b in ((1, 2), (5, 7), (100, 23))]
AB = "a, b = map(int, input().split())\nprint(a + b)\n"
ADD_TESTS = [TestCase(call="add", args=[a, b], expected=a + b) for a, b in ((1, 2), (5, 7))]


def stdio_job(sb, program: str, tests=AB_TESTS, **kw):
    return ajudge(sb, program, tests, mode="stdio", memory_mb=MEM, **kw)


async def gather_outcomes(sb, *coros):
    """`gather_batch` (one micro-batch after a warm-up job), each job's report or exception."""
    warm = ajudge(sb, RIGHT, ADD_TESTS[:1], mode="function")
    out = await asyncio.gather(warm, *coros, return_exceptions=True)
    assert not isinstance(out[0], BaseException) and out[0].all_passed, out[0]
    return out[1:]


# ================================================================ A01: IPC objects given to root
IPC = r'''
import ctypes
_libc = ctypes.CDLL(None, use_errno=True)
_libc.shmat.restype = ctypes.c_void_p
_libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
_libc.shmdt.argtypes = [ctypes.c_void_p]
IPC_PRIVATE, IPC_CREAT, IPC_SET, IPC_STAT = 0, 0o1000, 1, 2


def _give_to_root(ctl, ident, *pre):
    """Its owner may hand an object to any uid (IPC_SET); its creator stays the program's uid."""
    buf = ctypes.create_string_buffer(512)
    ctl(ident, *pre, IPC_STAT, buf)
    ctypes.c_uint32.from_buffer(buf, 4).value = 0  # struct ipc_perm: key, then the owner's uid
    return ctl(ident, *pre, IPC_SET, buf)


def _shm(nbytes):
    ident = _libc.shmget(IPC_PRIVATE, nbytes, IPC_CREAT | 0o600)
    addr = _libc.shmat(ident, None, 0)
    ctypes.memset(addr, 1, nbytes)  # charged to the sandbox's memory, and it stays when we detach
    _libc.shmdt(ctypes.c_void_p(addr))
    _give_to_root(_libc.shmctl, ident)


def _owners():
    out = []
    for kind, col in (("shm", 7), ("msg", 7), ("sem", 4)):
        out += [row.split()[col] for row in open("/proc/sysvipc/" + kind).read().splitlines()[1:]]
    return out


def _plant():
    """One object of each kind, each given to root."""
    _shm(1 << 20)
    _give_to_root(_libc.msgctl, _libc.msgget(IPC_PRIVATE, IPC_CREAT | 0o600))
    _give_to_root(_libc.semctl, _libc.semget(IPC_PRIVATE, 1, IPC_CREAT | 0o600), 0)


def _fill(headroom_mb):
    """Shared memory given to root until the sandbox's memory cgroup has `headroom_mb` left."""
    cg = "/sys/fs/cgroup/memory/"
    limit = int(open(cg + "memory.limit_in_bytes").read())
    while limit - int(open(cg + "memory.usage_in_bytes").read()) > (headroom_mb + 16) << 20:
        _shm(16 << 20)
'''
IPC_PLANTER = IPC + "_plant()\nprint('owners', *_owners())\n"
IPC_LOOK = IPC + "print(len(_owners()))\n"
IPC_FILLER = IPC + "_fill(100)\nprint('filled', len(_owners()))\n"
NEEDS_160_MB = "b = bytes([1]) * (160 << 20)\n" + AB  # well inside its 256 MiB, more than 100 MiB


async def test_ipc_objects_given_to_root_do_not_survive_the_job(sb):
    planter, look = await gather_batch(sb, stdio_job(sb, IPC_PLANTER, [TestCase(input="", output="never\n")]),
                                       stdio_job(sb, IPC_LOOK, [TestCase(input="", output="0\n")]))
    assert planter.verdicts[0].got.split() == ["owners", "0", "0", "0"], planter.verdicts  # the attack took
    assert_all_ac(look, "a batch-mate of the IPC planter sees no IPC object")
    assert_clean(sb)


async def test_shared_memory_given_to_root_does_not_starve_a_batch_mate(sb):
    # the filler gets time to fill the sandbox even on a loaded machine (in 2 s it sometimes did not)
    filler, honest = await gather_batch(sb, stdio_job(sb, IPC_FILLER, [TestCase(input="", output="never\n")],
                                                      time_limit_s=20),
                                        stdio_job(sb, NEEDS_160_MB))
    assert filler.verdicts[0].got.startswith("filled"), filler.verdicts  # it did fill the sandbox
    assert_all_ac(honest, "a batch-mate of the shared-memory filler")
    assert_all_ac(await stdio_job(sb, NEEDS_160_MB), "control: alone")


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
OOM_LOOK = "print(open('/sys/fs/cgroup/memory/memory.oom_control').read().split('oom_kill ')[1].split()[0])\n"


async def test_a_job_that_runs_its_sandbox_out_of_memory_is_the_last_there(sb):
    hog, look = await gather_batch(sb, stdio_job(sb, OOM_HOG, [TestCase(input="", output="done\n")]),
                                   stdio_job(sb, OOM_LOOK, [TestCase(input="", output="0\n")]))
    assert statuses(hog) == ["MLE"], (hog.verdicts, hog.notes)
    # the job after it ran on a sandbox where no OOM kill ever happened (before: the same one)
    assert_all_ac(look, "the batch-mate after an OOM kill")


# ================================================================ A02/A05/A08: what a job leaves in writable places
PLACES = r'''
import os
TAG = "tgplant-6b1f"


def _rw_mounts():
    out = []
    for line in open("/proc/self/mountinfo"):
        f = line.split()
        if f[5].split(",")[0] == "rw" and not f[4].startswith(("/proc", "/sys")):
            out.append(f[4])
    return out


def _places():
    dirs = ["/", "/tmp", "/var/tmp", "/dev", "/dev/shm", "/dev/mqueue", "/run", "/work", "/home", "/opt", "/var",
            os.getcwd(), os.path.dirname(os.getcwd()), os.path.dirname(os.path.dirname(os.getcwd())),
            os.path.expanduser("~"), *_rw_mounts()]
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]
'''
PLANT = PLACES + r'''
made = []
for d in _places():
    for make in (lambda p: open(p, "w").close(), os.mkdir):
        p = os.path.join(d, TAG + ("d" if make is os.mkdir else "f"))
        try:
            make(p)
            made.append(p)
        except OSError:
            pass
print(len(made), *made)
'''
FIND = PLACES + r'''
found = [os.path.join(d, TAG + k) for d in _places() for k in "fd" if os.path.lexists(os.path.join(d, TAG + k))]
for top in _rw_mounts():
    for root, dirs, files in os.walk(top):
        found += [os.path.join(root, n) for n in dirs + files if n.startswith(TAG)]
print(" ".join(sorted(set(found))) or "clean")
'''


async def test_nothing_a_job_writes_reaches_the_next_job(sb):
    plant, find = await gather_batch(sb, stdio_job(sb, PLANT, [TestCase(input="", output="never\n")]),
                                     stdio_job(sb, FIND, [TestCase(input="", output="clean\n")]))
    assert "/tmp/" + "tgplant" in plant.verdicts[0].got, plant.verdicts  # the control: /tmp is writable
    assert_all_ac(find, "a batch-mate looking for what the planter left")


SHARE = r'''
import hashlib, os, sys
data = sys.stdin.read()
key = None
for d in ("/work", "/tmp", "/dev/shm", os.path.dirname(os.getcwd())):
    for name in os.listdir(d) if os.access(d, os.R_OK) else []:
        if name == ".answers-" + hashlib.sha1(data.encode()).hexdigest():
            sys.stdout.write(open(os.path.join(d, name)).read())
            raise SystemExit
'''
SOLVER = SHARE + r'''
a, b = map(int, data.split())
out = f"{a + b}\n"
for d in ("/work", "/tmp", "/dev/shm", os.path.dirname(os.getcwd())):
    try:
        with open(os.path.join(d, ".answers-" + hashlib.sha1(data.encode()).hexdigest()), "w") as fh:
            fh.write(out)
    except OSError:
        pass
sys.stdout.write(out)
'''
COPIER = SHARE + "print(42)  # cannot solve it\n"


async def test_a_wrong_program_cannot_copy_a_solver_batch_mates_answers(sb):
    solver, copier = await gather_batch(sb, stdio_job(sb, SOLVER), stdio_job(sb, COPIER))
    assert_all_ac(solver, "the solver")
    assert statuses(copier) == ["WA"] * 3, copier.verdicts


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


async def test_the_wipe_after_a_job_is_charged_to_that_job(sb):
    deep, honest = await gather_batch(sb, stdio_job(sb, DEEP, AB_TESTS[:1]), stdio_job(sb, AB, AB_TESTS[:1]))
    assert_all_ac(honest, "the deep-tree builder's batch-mate")
    # before: the executor wiped the tree after the harness had reported, charged to no job (most of the call)
    uncharged = deep.duration_s - deep.own_s - honest.own_s
    assert uncharged < deep.own_s, (deep.duration_s, deep.own_s, honest.own_s)
    assert_clean(sb)


# ================================================================ A04: a batch larger than a call carries
PAD = "#" * (1 << 20)


def big_tests(n: int) -> list[TestCase]:
    return [TestCase(input=f"{i} {i}\n{PAD}\n", output=f"{2 * i}\n") for i in range(n)]


async def test_jobs_that_fit_alone_but_not_together_are_each_judged(sb):
    half = big_tests((MAX_INPUT_BYTES >> 20) // 2 + 1)  # 33 MiB each: two do not fit one call
    a, b = await gather_batch(sb, stdio_job(sb, AB, half), stdio_job(sb, AB, half))
    for r in (a, b):
        assert_all_ac(r, "a correct program with big tests")


async def test_a_job_too_large_alone_fails_only_itself(sb):
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
    over = LIMITS.memory_mb * 2
    with pytest.raises(JudgeConfigError) as err:  # before: MLE for a correct program using 200 MiB of 512
        judge(sb, USES_200_MB, AB_TESTS[:1], memory_mb=over)
    assert isinstance(err.value, ConfigError) and isinstance(err.value, InfrastructureError)
    assert f"memory_mb={over}" in str(err.value) and f"{LIMITS.memory_mb} MiB" in str(err.value), err.value
    r = judge(sb, USES_200_MB.replace("200", "160"), AB_TESTS[:1], memory_mb=LIMITS.memory_mb)
    assert_all_ac(r, "control: a limit the sandbox has")


# ================================================================ text no encoder takes
async def test_a_lone_surrogate_in_a_program_is_its_verdict(sb):
    stdio_bad = "s = '\ud800'\n" + AB
    fn_bad = "s = '\ud800'\n" + RIGHT
    r1, r2, mate = await gather_batch(sb, stdio_job(sb, stdio_bad),
                                      ajudge(sb, fn_bad, ADD_TESTS, mode="function"), stdio_job(sb, AB))
    for r in (r1, r2):
        assert r.notes == [] and set(statuses(r)) <= {"RE", "AC"}, (r.verdicts, r.notes)  # no harness crash
    assert statuses(r1) == ["RE"] * 3 and "SyntaxError" in r1.verdicts[0].message, r1.verdicts
    assert_all_ac(mate, "a batch-mate of the surrogate")


# ================================================================ R03: a session's control channel
FRAME = "import json, os, struct\ndef _frame(obj):\n    b = json.dumps(obj).encode()\n    return struct.pack('>I', len(b)) + b\n"
CELLS = {
    "part of a frame": "import os, struct\nos.write(3, struct.pack('>I', 100))\nprint(1)\n",
    "a frame no cell could send": "import os\nos.write(3, b'\\xff\\xff\\xff\\xff')\nprint(1)\n",
    "a reply that is not a status": FRAME + "os.write(3, _frame({'rc': 'zero'}))\nimport time\ntime.sleep(30)\n",
}
SHORT = Limits(timeout_s=2, memory_mb=256, pids=64, output_bytes=1 << 16)


@pytest.mark.parametrize("cell", list(CELLS))
def test_a_cell_that_writes_on_the_control_channel_is_its_own_failure(sb, cell):
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


def test_a_cell_that_stops_reading_its_channel_cannot_stall_the_executor(sb):
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
    """The control run that decides whose fault a failure is needs no worker of the pool (the session holds
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
    """The fixture's pool has one worker; a session holds it. Before: a call waited 300 s, then
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

