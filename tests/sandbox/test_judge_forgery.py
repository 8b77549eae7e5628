"""Forgery resistance of the judge, on both backends.

Every submission here is WRONG (add returns a - b, or a stdio program prints the wrong
answer) and tries to get a pass anyway. Each attack is built so that it WOULD pass if
the defence it targets were missing; the judge must fail every one of them.
"""

from __future__ import annotations

import asyncio
import secrets

import pytest

from tests.sandbox.conftest import under_gvisor
from toolgym.sandbox.judging import TestCase, ajudge, judge

WRONG = "def add(a, b):\n    return a - b\n"
RIGHT = "def add(a, b):\n    return a + b\n"
TEST = TestCase(code="assert add(1, 2) == 3")


def assert_failed(report) -> None:
    assert report.passed == 0, report.verdicts
    assert all(v.status != "AC" for v in report.verdicts)


def run_fn(sb, program: str, code: str = "assert add(1, 2) == 3", **kw):
    return judge(sb, program, [TestCase(code=code)], mode="function", **kw)


# ------------------------------------------------------------------ early exits
EXITS = {
    "exit(0) at load": WRONG + "exit(0)\n",
    "sys.exit(0) at load": WRONG + "import sys\nsys.exit(0)\n",
    "os._exit(0) at load": WRONG + "import os\nos._exit(0)\n",
    "sys.exit in atexit": WRONG + "import atexit, sys\natexit.register(lambda: sys.exit(0))\n",
    "os._exit in atexit": WRONG + "import atexit, os\natexit.register(os._exit, 0)\n",
    "SystemExit from the candidate": "def add(a, b):\n    raise SystemExit(0)\n",
    "exit() from the candidate": "def add(a, b):\n    exit()\n",
    "os._exit(0) from the candidate": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "KeyboardInterrupt from the candidate": "def add(a, b):\n    raise KeyboardInterrupt\n",
    "custom BaseException": "class Stop(BaseException):\n    pass\ndef add(a, b):\n    raise Stop()\n",
    "SystemExit with a lying __str__": "class E(SystemExit):\n    def __str__(self):\n        import os\n"
                                       "        os._exit(0)\ndef add(a, b):\n    raise E(0)\n",
}


@pytest.mark.parametrize("name", list(EXITS))
def test_early_exit_never_passes(sb, name):
    assert_failed(run_fn(sb, EXITS[name]))


def test_exit_zero_in_stdio_mode_without_the_answer_fails(sb):
    r = judge(sb, "import os\nos._exit(0)\n", [TestCase(input="1 2\n", output="3")])
    assert_failed(r)


# ------------------------------------------------------------------ patched builtins and helpers
# (program, test code): the test would pass if the program's patch reached the test.
PATCHES = {
    "builtins.isinstance": (WRONG + "import builtins\nbuiltins.isinstance = lambda *a: False\n",
                            "r = add(1, 2)\nassert r == 3 if isinstance(r, int) else True"),
    "isinstance shadowed in the namespace": (WRONG + "def isinstance(*a):\n    return False\n",
                                             "r = add(1, 2)\nassert r == 3 if isinstance(r, int) else True"),
    "builtins.abs": (WRONG + "import builtins\nbuiltins.abs = lambda x: 0\n", "assert abs(add(1, 2) - 3) < 1e-9"),
    "abs shadowed in the namespace": (WRONG + "abs = lambda x: 0\n", "assert abs(add(1, 2) - 3) < 1e-9"),
    "builtins.AssertionError": (
        WRONG + "import builtins\nclass Fake(Exception):\n    pass\nbuiltins.AssertionError = Fake\n",
        "try:\n    assert add(1, 2) == 3\nexcept AssertionError:\n    raise\n"),
    "builtins.AssertionError = BaseException": (
        WRONG + "import builtins\nbuiltins.AssertionError = SystemExit\n",
        "if add(1, 2) != 3:\n    raise AssertionError('wrong')\n"),
    "builtins.print": (WRONG + "import builtins, sys\nbuiltins.print = lambda *a, **k: sys.__stdout__.write('PASSED')\n",
                       "print('checking')\nassert add(1, 2) == 3"),
    "builtins.__import__": (
        WRONG + "import builtins, types\nreal = builtins.__import__\n"
                "def fake(name, *a, **k):\n    if name == 'math':\n"
                "        m = types.ModuleType('math')\n        m.isclose = lambda *a, **k: True\n        return m\n"
                "    return real(name, *a, **k)\nbuiltins.__import__ = fake\n",
        "import math\nassert math.isclose(add(1, 2), 3)"),
    "builtins.len": (WRONG + "import builtins\nbuiltins.len = lambda x: 3\n", "assert len([add(1, 2)] * add(2, 1)) == 3"),
    "math.isclose (preloaded module)": (WRONG + "import math\nmath.isclose = lambda *a, **k: True\n",
                                        "import math\nassert math.isclose(add(1, 2), 3)"),
    "unittest assertEqual (module the program imported)": (
        WRONG + "import unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\n",
        "import unittest\nunittest.TestCase().assertEqual(add(1, 2), 3)"),
    "class attribute of a preloaded module": (
        WRONG + "import random\nrandom.Random.randint = lambda self, a, b: 0\n",
        "import random\nif random.Random(0).randint(1, 5) != 0:\n    assert add(1, 2) == 3"),
    "sys.modules entry replaced": (
        WRONG + "import sys, types\nm = types.ModuleType('math')\nm.isclose = lambda *a, **k: True\n"
                "sys.modules['math'] = m\n",
        "import math\nassert math.isclose(add(1, 2), 3)"),
    "test helper predefined by the program": (
        WRONG + "def check(candidate):\n    return None\n",
        "def check(candidate):\n    assert candidate(1, 2) == 3\ncheck(add)"),
    "trace hook that swallows the assertion": (
        WRONG + "import sys\ndef tr(frame, event, arg):\n    if event == 'exception':\n        frame.f_lineno\n"
                "    return tr\nsys.settrace(tr)\n",
        "assert add(1, 2) == 3"),
    "audit hook planted at load": (
        WRONG + "import sys, os\ndef hook(event, args):\n    if event == 'exec':\n        os._exit(0)\n"
                "sys.addaudithook(hook)\n",
        "assert add(1, 2) == 3"),
    "timer that exits cleanly during the test": (
        WRONG + "import signal, os\nsignal.signal(signal.SIGALRM, lambda *a: os._exit(0))\n"
                "signal.setitimer(signal.ITIMER_REAL, 0.05)\n",
        "import time\ntime.sleep(0.3)\nassert add(1, 2) == 3"),
}


@pytest.mark.parametrize("name", list(PATCHES))
def test_patches_do_not_reach_the_test(sb, name):
    program, code = PATCHES[name]
    assert_failed(run_fn(sb, program, code))
    # control: the same test passes for the right solution, so the test itself is sound
    control = run_fn(sb, RIGHT, code)
    assert control.passed == 1, (name, control.verdicts)


# ------------------------------------------------------------------ fake markers and verdicts
FAKE_LINES = (
    "PASSED\nAC\nAll tests passed\nOK\n"
    '{"j": 0, "i": 0, "status": "AC", "time_s": 0.0, "message": ""}\n'
    '{"done": true, "j": 0, "elapsed_s": 0.1}\n{"all_done": true}\n'
    + "".join(f"{c * 32} " + '{"j": 0, "i": 0, "status": "AC"}\n' for c in "0123456789abcdef")
)


def test_fake_markers_and_verdict_json_on_stdout_do_not_pass(sb):
    loud = WRONG.replace("return a - b", f"print({FAKE_LINES!r})\n    return a - b") + f"print({FAKE_LINES!r})\n" \
        f"import sys, os\nsys.stderr.write({FAKE_LINES!r})\nos.write(1, {FAKE_LINES!r}.encode())\n"
    assert_failed(run_fn(sb, loud))
    r = judge(sb, f"print({FAKE_LINES!r})\nprint(4)\n", [TestCase(input="1 2\n", output="3")])
    assert_failed(r)


def test_fake_pass_messages_on_every_fd_do_not_pass(sb):
    spam = WRONG + (
        "import os\nfor fd in range(3, 64):\n    for tag in (b'L', b'A', b'V'):\n"
        "        try:\n            os.write(fd, tag + (32).to_bytes(4, 'big') + b'0' * 32)\n"
        "        except OSError:\n            pass\n")
    assert_failed(run_fn(sb, spam))


# ------------------------------------------------------------------ reading tests and memory
FIND_SECRET = r'''
import os, re, sys
OWN = {p for p in (sys.prefix, sys.base_prefix) if len(p) > 4}
PAT = re.compile(rb"TGSECRET-[0-9a-f]{24}")
found = []

def scan(blob):
    m = PAT.search(blob)
    if m:
        found.append(m.group().decode())

def files():
    roots = [".", "..", "/work", "/tmp"]
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            roots += [f"/proc/{pid}/cwd", f"/proc/{pid}/root/tmp"]
            for name in ("environ", "cmdline"):
                try:
                    with open(f"/proc/{pid}/{name}", "rb") as fh:
                        scan(fh.read())
                except OSError:
                    pass
            try:
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    try:
                        with open(f"/proc/{pid}/fd/{fd}", "rb") as fh:
                            os.set_blocking(fh.fileno(), False)
                            scan(fh.read(1 << 20) or b"")
                    except (OSError, TypeError):
                        pass
            except OSError:
                pass
    for root in roots:
        for dirpath, dirs, names in os.walk(root):
            if dirpath.startswith(("/proc", "/sys", "/dev", "/usr", "/lib", "/bin", "/sbin", "/etc", "/var/lib")):
                dirs[:] = []
                continue
            if any(p in dirpath for p in OWN):  # the interpreter's own packages (under /tmp in a CI clone)
                dirs[:] = []
                continue
            for n in names:
                try:
                    with open(os.path.join(dirpath, n), "rb") as fh:
                        scan(fh.read(1 << 22))
                except OSError:
                    pass

def memory(pid):
    try:
        maps = open(f"/proc/{pid}/maps").read().splitlines()
        mem = open(f"/proc/{pid}/mem", "rb", 0)
    except OSError:
        return
    for line in maps:
        addr, perms = line.split()[:2]
        if not perms.startswith("r"):
            continue
        lo, hi = (int(x, 16) for x in addr.split("-"))
        if hi - lo > 1 << 28:
            continue
        try:
            mem.seek(lo)
            scan(mem.read(hi - lo))
        except (OSError, ValueError, OverflowError):
            pass

try:
    files()
except Exception:
    pass
for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
    memory(int(pid))
'''


def test_stdio_program_cannot_find_the_expected_output(sb):
    secret = "TGSECRET-" + secrets.token_hex(12)
    prog = FIND_SECRET + "print(found[0] if found else 'nothing')\n"
    r = judge(sb, prog, [TestCase(input="", output=secret)], time_limit_s=20.0)
    assert r.verdicts[0].status == "WA", r.verdicts[0]
    assert secret not in (r.verdicts[0].got or "")
    # control: the same scanner does find a secret that IS in its reach
    r = judge(sb, f"open('x', 'w').write({secret!r})\n" + prog, [TestCase(input="", output=secret)],
              time_limit_s=20.0)
    assert r.verdicts[0].status == "AC", r.verdicts[0]


def test_function_program_cannot_find_the_test_at_load(sb):
    secret = "TGSECRET-" + secrets.token_hex(12)
    # If the scan found the test (and so learned what is checked), add would turn correct.
    prog = FIND_SECRET + "def add(a, b):\n    return a + b if found else a - b\n"
    r = run_fn(sb, prog, f"assert add(1, 2) == 3  # {secret}", time_limit_s=20.0)
    assert_failed(r)


# ------------------------------------------------------------------ writing verdicts, killing the harness
def test_writing_verdict_files_does_not_pass(sb):
    prog = WRONG + r'''
import os, json
fake = json.dumps({"j": 0, "i": 0, "status": "AC"})
for d in (".", "..", "../..", "/tmp", "/work"):
    for name in ("judge_spec.json", "verdict.json", "result.json", "judge_zygote.py"):
        try:
            with open(os.path.join(d, name), "w") as fh:
                fh.write(fake)
        except OSError:
            pass
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for fd in ("1", "2"):
            try:
                with open(f"/proc/{pid}/fd/{fd}", "w") as fh:
                    fh.write("0" * 32 + " " + fake + "\n")
            except OSError:
                pass
'''
    assert_failed(run_fn(sb, prog))
    assert_failed(judge(sb, prog + "print(4)\n", [TestCase(input="", output="3")]))


KILLER = WRONG + r'''
import os, signal
def stat_ppid(pid):
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])
zygote = os.getppid()
harness = stat_ppid(zygote)
for pid in (harness, zygote):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
try:
    os.kill(-1, signal.SIGKILL)
except OSError:
    pass
'''


def test_killing_the_harness_fails_the_submission_and_the_sandbox_survives(sb):
    r = judge(sb, KILLER, [TEST, TEST], mode="function")
    assert_failed(r)
    assert r.total == 2
    after = judge(sb, RIGHT, [TEST], mode="function")
    assert after.passed == 1


async def test_a_killer_batched_with_others_does_not_fail_them(sb):
    jobs = [ajudge(sb, RIGHT, [TEST], mode="function"), ajudge(sb, KILLER, [TEST], mode="function"),
            ajudge(sb, RIGHT, [TEST], mode="function"), ajudge(sb, RIGHT, [TEST], mode="function")]
    reports = await asyncio.gather(*jobs)
    assert [r.passed for r in reports] == [1, 0, 1, 1]


def test_threads_and_processes_left_running_at_load_decide_nothing(sb):
    # A thread that writes forged pass frames on every descriptor, a child, a daemon: the
    # candidate's process holds no verdict channel, so each only ever fails its own test.
    thread = WRONG + (
        "import threading, os, time\ndef spam():\n    while True:\n        for fd in range(3, 12):\n"
        "            try:\n                os.write(fd, b'A' + (32).to_bytes(4, 'big') + b'0' * 32)\n"
        "            except OSError:\n                pass\n        time.sleep(0.001)\n"
        "threading.Thread(target=spam, daemon=True).start()\n")
    assert_failed(run_fn(sb, thread))
    fork = WRONG + "import os, time\nif os.fork() == 0:\n    time.sleep(30)\n    os._exit(0)\n"
    assert_failed(run_fn(sb, fork))
    daemon = WRONG + "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n" \
                     "        time.sleep(30)\n    os._exit(0)\nos.wait()\n"
    assert_failed(run_fn(sb, daemon))
    # control: a right solution that leaves a child and a daemon still passes
    assert run_fn(sb, fork.replace("a - b", "a + b")).passed == 1
    assert run_fn(sb, daemon.replace("a - b", "a + b")).passed == 1


# ------------------------------------------------------------------ rigged equality
ALWAYS_EQUAL = "class Eq:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n" \
               "def add(a, b):\n    return Eq()\n"


def test_rigged_eq_is_caught_by_the_call_form(sb):
    r = judge(sb, ALWAYS_EQUAL, [TestCase(call="add", args=[1, 2], expected=3)], mode="function")
    assert_failed(r)


def test_rigged_eq_in_assert_form_decides_nothing(sb):
    # the returned object reaches the evaluator as data: its __eq__ never runs there
    assert_failed(run_fn(sb, ALWAYS_EQUAL))
    truthy = "class T:\n    def __bool__(self):\n        return True\n    def __sub__(self, o):\n        return 0\n" \
             "    def __abs__(self):\n        return 0\ndef add(a, b):\n    return T()\n"
    assert_failed(run_fn(sb, truthy, "assert abs(add(1, 2) - 3) < 1e-9"))
    assert run_fn(sb, RIGHT, "assert abs(add(1, 2) - 3) < 1e-9").passed == 1


async def test_a_daemon_left_by_one_job_reaches_no_batch_mate(sb):
    # Once a flake with a real cause (every judge thread's sweep killed every orphan under the
    # harness, another job's daemon included). Jobs now run one after the other, and between
    # two jobs every process of the untrusted uids is killed at once: the daemon's own
    # (right) answer still passes, it dies before the next job, and batch-mates are judged as
    # alone. Repeated, as the old flake needed luck to show.
    daemon = RIGHT + (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        time.sleep(30)\n    os._exit(0)\nos.wait()\n")
    spy = ("import os\ndef add(a, b):\n    others = [p for p in os.listdir('/proc') if p.isdigit() and "
           "int(p) != os.getpid() and open(f'/proc/{p}/status').read().split('Uid:')[1].split()[0] == "
           "str(os.getuid())]\n    return a + b if not others else a - b\n")
    for _ in range(5):
        jobs = [ajudge(sb, RIGHT, [TEST], mode="function"), ajudge(sb, daemon, [TEST], mode="function"),
                ajudge(sb, spy, [TEST], mode="function"), ajudge(sb, WRONG, [TEST], mode="function")]
        reports = await asyncio.gather(*jobs)
        assert [r.passed for r in reports] == [1, 1, 1, 0], [r.verdicts for r in reports]


SPY = r'''
import os, time

GVISOR = {gvisor}

def reach(pid):
    found = []
    try:
        open(f"/proc/{{pid}}/mem", "rb").close()
        found.append("mem")
    except OSError:
        pass
    try:
        if open(f"/proc/{{pid}}/environ", "rb").read() or not GVISOR:  # gVisor: opens for all; what does it hold?
            found.append("environ")
    except OSError:
        pass
    try:
        fds = os.listdir(f"/proc/{{pid}}/fd")
    except OSError:
        return found
    if not GVISOR:
        return found + fds  # Linux: another uid's, or a non-dumpable process's, fd table is closed to us
    # gVisor lists every process's fds to every uid: what counts is whether one of them opens, unless it names a
    # file anyone may open by its name anyway (/dev/null, /proc/meminfo): that holds nothing of the process
    for fd in fds:
        path = f"/proc/{{pid}}/fd/{{fd}}"
        try:
            open(os.readlink(path), "rb").close()
            continue
        except OSError:
            pass
        try:
            open(path, "rb").close()
            found.append(path)
        except OSError:
            pass
    return found

def others():
    # every process but this one: the harness, the executor, other jobs' test processes, whatever they are named
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]

reached = []
deadline = time.time() + 1.5
while time.time() < deadline and not reached:
    for pid in others():
        reached += reach(pid)
    time.sleep(0.01)

def add(a, b):
    return a + b if reached else a - b
'''


def spies(sb) -> tuple[str, str]:
    """The spy for `sb`'s kernel, and its control: the same probe on its own process, which it may reach (its
    own fd table, holding a file of its own): it passes only if the probe works in this sandbox, so the spy's
    failure to reach any other process means something. Under gVisor every uid may list any process's /proc/PID/fd and read its
    environ (a runc-only mechanism closes both: the ptrace access check): there the spy reaches a process when
    it opens its memory, reads any of its environment, or opens a fd of it that names no file the spy could
    open by name anyway (the executor's /proc/meminfo, a /dev/null)."""
    spy = SPY.format(gvisor=under_gvisor(sb))
    # its own fd table names a file of its own too, unlinked: a fd that reopens under gVisor (its pipes and
    # sockets do not) and that no name opens
    control = spy.replace("    for pid in others():\n        reached += reach(pid)",
                          "    held = open(f'/tmp/control-{os.getpid()}', 'w')\n    os.unlink(held.name)\n"
                          "    reached += reach(os.getpid())")
    assert control != spy
    return spy, control


SLOW_WRONG = "import time\ndef add(a, b):\n    time.sleep(1.0)\n    return a - b\n"


@pytest.mark.slow
async def test_jobs_side_by_side_cannot_reach_each_other(sb):
    """Batched function-mode jobs run two at a time. A spy job that could open another job's
    test process (its memory, environment or pipes) would pass; it must not."""
    spy, control = spies(sb)
    reports = await asyncio.gather(
        ajudge(sb, RIGHT, [TEST], mode="function"),
        ajudge(sb, SLOW_WRONG, [TEST], mode="function", time_limit_s=5.0),
        ajudge(sb, spy, [TEST], mode="function", time_limit_s=5.0),
        ajudge(sb, SLOW_WRONG, [TEST], mode="function", time_limit_s=5.0),
        ajudge(sb, spy, [TEST], mode="function", time_limit_s=5.0),
        ajudge(sb, control, [TEST], mode="function", time_limit_s=5.0))
    assert [r.passed for r in reports] == [1, 0, 0, 0, 0, 1], [r.verdicts for r in reports]
