"""Red-team attacks on the sandbox and the judge, on every backend.

Each test runs a real attack, built so that it WOULD succeed if the defence it targets
were missing (most were first run against the executor and judge of commit d8f5a9c),
and asserts that it fails: a wrong program is not AC, a batch-mate's correct verdict is
unchanged, planted state is gone. Each test also runs an honest control in the same
sandbox, which must pass, so the attack's test itself is sound.

Routes (see the module docstring of toolgym.sandbox.judging for the threat model):
1. function mode, call form: the expected value must never be reachable by the candidate.
2. function mode, assert form: the pass token, the result channel and the pristine state
   must not be reachable; hooks that run during the test must not forge a pass.
3. memory of earlier calls must not be readable by a later call.
4. nothing a call leaves (SysV IPC, POSIX queues, deep trees, files, processes) survives it.
5. batch-mates (micro-batched `ajudge` calls) cannot harm or read each other.
6. local backend: host files, user namespaces, seccomp, ptrace, /dev/shm, process limit.
7. the executor is unreachable; sandboxed code holds no privilege; docker logs are empty.
8. a daemon left by one batched job fails that job and no other.
Extra: sys.path[0] of the judge is the call's writable work dir (module shadowing).

Every attack program only uses the public API's behaviour to be judged; what it knows of
today's internals (names of locals, the child protocol) is the attacker's knowledge.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path

import pytest

import toolgym
from tests.sandbox.conftest import open_for, require_backend
from tests.sandbox.judging import MEM, RIGHT, TL, WRONG, assert_all_ac, assert_no_ac, fn, statuses
from toolgym.sandbox import Limits
from toolgym.sandbox.judging import TestCase, ajudge, judge

REPO = Path(toolgym.__file__).resolve().parents[2]
CALL = Limits(timeout_s=5, memory_mb=256, pids=64, output_bytes=256 << 10)

ASSERT_TEST = "assert add(1, 2) == 3\nassert add(-5, 9) == 4\n"
HUMANEVAL_TEST = ("def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-5, 9) == 4\n"
                  "    assert candidate(0, 0) == 0\n\ncheck(add)\n")


# ------------------------------------------------------------------------------------ helpers
def stdio(sb, program: str, tests, **kw):
    kw.setdefault("time_limit_s", TL)
    kw.setdefault("memory_mb", MEM)
    return judge(sb, program, tests, mode="stdio", **kw)




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


def random_call_tests(n: int = 3) -> list[TestCase]:
    """Call-form tests with unguessable expected values (a - b never matches a + b)."""
    rng = secrets.SystemRandom()
    out = []
    for _ in range(n):
        a, b = rng.randrange(10 ** 6, 10 ** 9), rng.randrange(10 ** 6, 10 ** 9)
        out.append(TestCase(call="add", args=[a, b], expected=a + b))
    return out


# Shared attack code, prepended to attack programs.
FORGE = r'''
import os as _tg_os, sys as _tg_sys


def _tg_frames(start=None):
    out, f = [], start if start is not None else _tg_sys._getframe()
    while f is not None:
        out.append(f)
        f = f.f_back
    for top in list(_tg_sys._current_frames().values()):
        while top is not None:
            out.append(top)
            top = top.f_back
    return out


def _tg_forge(start=None):
    """Find the pass token in a frame of this process and send the pass message, exit 0."""
    for fr in _tg_frames(start):
        try:
            tok = fr.f_locals.get("token")
        except Exception:
            continue
        if type(tok) is bytes and len(tok) == 32:
            _tg_os.write(4, b"A" + len(tok).to_bytes(4, "big") + tok)
            _tg_os._exit(0)
'''

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


TOKEN_PATTERN = r'''
import struct as _tg_struct


def _tg_token_pattern():
    # A live bytes object of 32 lowercase hex digits, hash not computed yet: the pass token.
    head = _tg_re.escape(_tg_struct.pack("<Qq", id(bytes), 32))
    return head + rb"\xff{8}([0-9a-f]{32})\x00"
'''


# =========================================================================== 1. call form
STEAL_CALL = {
    "expected from the caller's frames (sys._getframe)": r'''
import sys
def add(a, b):
    f = sys._getframe(1)
    while f is not None:
        for v in list(f.f_locals.values()):
            if isinstance(v, dict) and "expected" in v:
                return v["expected"]
        f = f.f_back
    return a - b
''',
    "expected from inspect.stack()": r'''
import inspect
def add(a, b):
    for info in inspect.stack():
        for v in list(info.frame.f_locals.values()):
            if isinstance(v, dict) and "expected" in v:
                return v["expected"]
    return a - b
''',
    "expected from gc.get_objects()": r'''
import gc
def add(a, b):
    for o in gc.get_objects():
        if type(o) is dict and "expected" in o and o.get("args") == [a, b]:
            return o["expected"]
    return a - b
''',
    "expected through gc.get_referrers of the arguments": r'''
import gc
def add(a, b):
    for holder in gc.get_referrers(a):
        if type(holder) is list and holder == [a, b]:
            for d in gc.get_referrers(holder):
                if type(d) is dict and "expected" in d:
                    return d["expected"]
    return a - b
''',
    "assert-form pass message sent from a call test": FORGE + r'''
def add(a, b):
    _tg_forge()
    return a - b
''',
}


@pytest.mark.parametrize("name", list(STEAL_CALL))
def test_call_form_expected_value_is_out_of_reach(sb, name):
    tests = random_call_tests()
    assert_no_ac(fn(sb, WRONG + STEAL_CALL[name], tests), name)
    assert_all_ac(fn(sb, RIGHT, tests), "control")


# =========================================================================== 2. assert form
SHADOW_FRACTIONS = r'''
import os, sys
FAKE = "class Fraction:\n    def __init__(self, *a, **k):\n        pass\n    def __eq__(self, other):\n        return True\n"
for d in sys.path:
    try:
        with open(os.path.join(d or ".", "fractions.py"), "w") as fh:
            fh.write(FAKE)
    except OSError:
        pass
'''
# (program, test code). Every program's add is wrong (a - b); each would pass if its hook
# reached the token, the result channel, the pristine state the test runs with, or the test.
ASSERT_ATTACKS: dict[str, tuple[str, str]] = {
    "child protocol spoken at import (fd 3/4)": (WRONG + r'''
import os
def _rd(n):
    buf = b""
    while len(buf) < n:
        c = os.read(3, n - len(buf))
        if not c:
            os._exit(1)
        buf += c
    return buf
os.write(4, b"L" + (0).to_bytes(4, "big"))
head = _rd(5)
body = _rd(int.from_bytes(head[1:], "big"))
os.write(4, b"A" + (32).to_bytes(4, "big") + body[:32])
os._exit(0)
''', ASSERT_TEST),
    "token from the caller's frames (sys._getframe)": (FORGE + r'''
def add(a, b):
    _tg_forge()
    return a - b
''', ASSERT_TEST),
    "token from inspect.stack()": (FORGE + r'''
import inspect
def add(a, b):
    for info in inspect.stack():
        _tg_forge(info.frame)
    return a - b
''', HUMANEVAL_TEST),
    "token from sys._current_frames() in a thread the candidate starts": (FORGE + r'''
import threading
def add(a, b):
    t = threading.Thread(target=_tg_forge)
    t.start()
    t.join()
    return a - b
''', ASSERT_TEST),
    "thread started at import waits for the token": (FORGE + r'''
import threading, time
def _watch():
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        for top in list(_tg_sys._current_frames().values()):
            _tg_forge(top)
        time.sleep(0.001)
threading.Thread(target=_watch, daemon=True).start()
def add(a, b):
    return a - b
''', ASSERT_TEST),
    "token found by scanning this process's memory (ctypes)": (MEMSCAN + TOKEN_PATTERN + r'''
import os
def add(a, b):
    hits = _tg_memscan(_tg_token_pattern())
    if len(hits) == 1:
        tok = hits[-1].group(1)
        os.write(4, b"A" + len(tok).to_bytes(4, "big") + tok)
        os._exit(0)
    return a - b
''', ASSERT_TEST),
    "send closure from gc.get_objects(), token from memory": (MEMSCAN + TOKEN_PATTERN + r'''
import gc, os, types
def add(a, b):
    sends = [o for o in gc.get_objects() if type(o) is types.FunctionType and o.__name__ == "send"
             and o.__closure__]
    hits = _tg_memscan(_tg_token_pattern())
    if sends and len(hits) == 1:
        sends[-1](b"A", hits[-1].group(1))
        os._exit(0)
    return a - b
''', ASSERT_TEST),
    "pristine builtins poisoned through gc (isinstance)": (WRONG + r'''
import builtins, gc
gc.unfreeze()
for o in gc.get_objects():
    if type(o) is dict and o is not builtins.__dict__ and o.get("isinstance") is isinstance:
        o["isinstance"] = lambda *a, **k: False
''', "r = add(1, 2)\nassert r == 3 if isinstance(r, int) else True\n"),
    "pristine builtins poisoned through gc (abs)": (WRONG + r'''
import builtins, gc
gc.unfreeze()
for o in gc.get_objects():
    if type(o) is dict and o is not builtins.__dict__ and o.get("abs") is abs:
        o["abs"] = lambda x: 0
''', "assert abs(add(1, 2) - 3) < 1e-9\n"),
    "module snapshot poisoned through gc (math.isclose)": (WRONG + r'''
import gc, math
gc.unfreeze()
for o in gc.get_objects():
    if type(o) is dict and o is not math.__dict__ and o.get("__name__") == "math" and "isclose" in o:
        o["isclose"] = lambda *a, **k: True
math._tg_touched = 1  # a changed dict: the restore copies the (poisoned) snapshot back
''', "import math\nassert math.isclose(add(1, 2), 3)\n"),
    "__del__ run by the restore re-patches a module": (WRONG + r'''
import math, random
class _Repatch:
    def __del__(self):
        math.isclose = lambda *a, **k: True
random.Random._tg_trigger = _Repatch()  # deleted by the class restore, after modules were restored
''', "import math\nassert math.isclose(add(1, 2), 3)\n"),
    "weakref.finalize run by the restore re-patches a module": (WRONG + r'''
import math, random, weakref
class _Obj:
    pass
random.Random._tg_trigger = _Obj()
weakref.finalize(random.Random._tg_trigger, setattr, math, "isclose", lambda *a, **k: True)
''', "import math\nassert math.isclose(add(1, 2), 3)\n"),
    "__del__ run by the restore after the failed test forges": (FORGE + r'''
import random
class _Forger:
    def __del__(self):
        _tg_forge()
def add(a, b):
    random.Random._tg_trigger = _Forger()
    return a - b
''', ASSERT_TEST),
    "weakref.finalize run by the restore after the failed test forges": (FORGE + r'''
import random, weakref
class _Obj:
    pass
def add(a, b):
    random.Random._tg_trigger = _Obj()
    weakref.finalize(random.Random._tg_trigger, _tg_forge)
    return a - b
''', ASSERT_TEST),
    "__del__ of a garbage cycle forges when gc runs": (FORGE + r'''
import gc
class _Cycle:
    def __del__(self):
        _tg_forge()
def add(a, b):
    gc.set_threshold(1, 1, 1)
    c = _Cycle()
    c.me = c
    del c
    return a - b
''', ASSERT_TEST),
    "atexit hooks forge": (FORGE + r'''
import atexit
atexit.register(_tg_forge)
def add(a, b):
    atexit.register(_tg_forge)
    return a - b
''', ASSERT_TEST),
    "sys.settrace by the candidate forges on the next call event": (FORGE + r'''
def _tracer(frame, event, arg):
    _tg_forge(frame)
    return None
def add(a, b):
    _tg_sys.settrace(_tracer)
    return a - b
''', ASSERT_TEST),
    "sys.setprofile by the candidate forges": (FORGE + r'''
def _profiler(frame, event, arg):
    _tg_forge(frame)
def add(a, b):
    _tg_sys.setprofile(_profiler)
    return a - b
''', ASSERT_TEST),
    "signal handler + setitimer forge during the test": (FORGE + r'''
import signal, time
def add(a, b):
    signal.signal(signal.SIGALRM, lambda sig, frame: _tg_forge(frame))
    signal.setitimer(signal.ITIMER_REAL, 0.01)
    end = time.monotonic() + 0.5
    while time.monotonic() < end:
        pass
    return a - b
''', ASSERT_TEST),
    "returned object: __eq__ forges": (FORGE + r'''
class _R:
    def __eq__(self, other):
        _tg_forge()
        return False
    __hash__ = None
def add(a, b):
    return _R()
''', ASSERT_TEST),
    "returned object: __eq__ returns an object whose __bool__ is True": (r'''
class _T:
    def __bool__(self):
        return True
class _R:
    def __eq__(self, other):
        return _T()
    __hash__ = None
def add(a, b):
    return _R()
''', ASSERT_TEST),
    "returned object: __sub__ and __abs__ rigged": (r'''
class _Zero:
    def __abs__(self):
        return 0
class _R:
    def __sub__(self, other):
        return _Zero()
def add(a, b):
    return _R()
''', "assert abs(add(1, 2) - 3) < 1e-9\n"),
    "math.isclose patched by the candidate during the test": (r'''
import math
def add(a, b):
    math.isclose = lambda *a, **k: True
    return a - b
''', "r = add(1, 2)\nimport math\nassert math.isclose(r, 3)\n"),
    "operator.eq patched by the candidate during the test": (r'''
import operator
def add(a, b):
    operator.eq = lambda x, y: True
    return a - b
''', "import operator\nr = add(1, 2)\nassert operator.eq(r, 3)\n"),
    "unittest assertEqual patched by the candidate during the test": (r'''
def add(a, b):
    import unittest
    unittest.TestCase.assertEqual = lambda *a, **k: None
    return a - b
''', "import unittest\nr = add(1, 2)\nunittest.TestCase().assertEqual(r, 3)\n"),
    "ctypes: int's tp_richcompare replaced (== always true)": (r'''
import ctypes
_FN = ctypes.CFUNCTYPE(ctypes.py_object, ctypes.py_object, ctypes.py_object, ctypes.c_int)
_EQ = (False, False, True, False, False, False)  # Py_EQ == 2, looked up without comparing ints
_keep = []
def _rig():
    base = id(int)
    name = ctypes.c_char_p.from_address(base + 24).value
    flags = ctypes.c_ulong.from_address(base + 168).value
    if name != b"int" or not flags & (1 << 24):  # not the CPython 3.11-3.13 type layout
        return
    slot = ctypes.c_void_p.from_address(base + 200)
    orig = _FN(slot.value)
    def rich(a, b, op):
        return True if _EQ[op] else orig(a, b, op)
    cb = _FN(rich)
    _keep.extend([orig, cb, rich])
    slot.value = ctypes.cast(cb, ctypes.c_void_p).value
def add(a, b):
    r = a - b
    _rig()
    return r
''', "assert add(1, 2) == 3\n"),
    "stdlib module shadowed on sys.path (fractions)": (WRONG + SHADOW_FRACTIONS,
                                                       "from fractions import Fraction\n"
                                                       "assert Fraction(add(1, 2)) == Fraction(3)\n"),
}


@pytest.mark.parametrize("name", list(ASSERT_ATTACKS))
def test_assert_form_forgery_fails(sb, name):
    program, code = ASSERT_ATTACKS[name]
    assert_no_ac(fn(sb, program, [TestCase(code=code)]), name)
    assert_all_ac(fn(sb, RIGHT, [TestCase(code=code)]), "control")


def test_assert_form_sys_monitoring_forgery_fails(sb):
    has = sb.run("import sys\nprint(hasattr(sys, 'monitoring'))", limits=CALL)
    assert has.status == "ok", has
    if has.stdout.strip() != "True":
        pytest.skip("sys.monitoring needs Python 3.12+ in the sandbox (the attribute is missing)")
    program = FORGE + r'''
mon = _tg_sys.monitoring
TOOL = 3
def _hook(*args):
    _tg_forge()
def add(a, b):
    mon.use_tool_id(TOOL, "tg")
    mon.register_callback(TOOL, mon.events.PY_START, _hook)
    mon.set_events(TOOL, mon.events.PY_START)
    return a - b
'''
    assert_no_ac(fn(sb, program, [TestCase(code=ASSERT_TEST)]))
    assert_all_ac(fn(sb, RIGHT, [TestCase(code=ASSERT_TEST)]), "control")


# --------------------------------------------------------------- sys.path shadowing, other modes
FRACTION_CHECKER = ("from fractions import Fraction\n"
                    "def check(inp, expected, got):\n"
                    "    return Fraction(got.strip()) == Fraction(expected.strip())\n")


def test_custom_checker_cannot_be_shadowed_by_the_program(sb):
    """A trusted custom checker imports a module the program planted on sys.path[0]."""
    tests = [TestCase(input="1 2\n", output="3\n"), TestCase(input="5 7\n", output="12\n")]
    wrong = SHADOW_FRACTIONS + "a, b = map(int, input().split())\nprint(a - b)\n"
    assert_no_ac(stdio(sb, wrong, tests, checker="custom", checker_program=FRACTION_CHECKER))
    right = "a, b = map(int, input().split())\nprint(a + b)\n"
    assert_all_ac(stdio(sb, right, tests, checker="custom", checker_program=FRACTION_CHECKER), "control")


# =========================================================================== 3. memory of earlier calls
SCAN = MEMSCAN + r'''
import os
control = "".join(["TGMEM", os.urandom(16).hex()]).encode()  # built at run time: in this heap only
pids = ["self"] + [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]
found = {m.group().decode() for m in _tg_memscan(rb"TGMEM[0-9a-f]{32}", pids)}
print("CONTROL", control.decode() in found)
print("FOUND", " ".join(sorted(found)))
'''


def _scan(sb) -> set[str]:
    r = sb.run(SCAN, limits=Limits(timeout_s=20, memory_mb=256, output_bytes=256 << 10))
    assert r.status == "ok", r
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
    assert lines.get("CONTROL") == "True", r.stdout  # the scanner does read memory
    return set(lines.get("FOUND", "").split())


def _secret() -> str:
    return "TGMEM" + secrets.token_hex(16)


def test_a_later_run_cannot_read_an_earlier_runs_code_stdin_or_output(sb):
    in_code, in_stdin, in_stdout = _secret(), _secret(), _secret()
    head, tail = in_stdout[:15], in_stdout[15:]  # the output is built at run time: not in the code
    r = sb.run(f"import sys\nsecret = {in_code!r}\ndata = sys.stdin.read()\nprint({head!r} + {tail!r})\n"
               "print(len(secret) + len(data))", stdin=in_stdin, limits=CALL)
    assert (r.status, r.stdout) == ("ok", f"{in_stdout}\n{len(in_code) + len(in_stdin)}\n"), r
    found = _scan(sb)
    assert in_code not in found, "an earlier call's program was found in memory"
    assert in_stdin not in found, "an earlier call's stdin was found in memory"
    assert in_stdout not in found, "an earlier call's output was found in memory"


def test_a_later_run_cannot_read_an_earlier_judges_hidden_tests(sb):
    expected, test_input, asserted = _secret(), _secret(), _secret()
    r = stdio(sb, "print('no idea')", [TestCase(input=test_input + "\n", output=expected + "\n")])
    assert statuses(r) == ["WA"]
    r = fn(sb, "def f():\n    return 0\n", [TestCase(code=f"assert f() == 0, {asserted!r}")])
    assert statuses(r) == ["AC"]
    found = _scan(sb)
    assert expected not in found, "an earlier judge's expected output was found in memory"
    assert test_input not in found, "an earlier judge's test input was found in memory"
    assert asserted not in found, "an earlier judge's test code was found in memory"


# =========================================================================== 4. state that survives a call
SYSV_PLANT = r'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmdt.argtypes = [ctypes.c_void_p]
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
IPC_CREAT = 0o1000

def read_int(path):
    with open(path) as fh:
        v = fh.read().split()[0]
    return None if v == "max" else int(v)

def room():
    """Bytes left in this sandbox's memory cgroup, if it can be read."""
    for lim, cur in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                     ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            limit, used = read_int(lim), read_int(cur)
        except (OSError, ValueError, IndexError):
            continue
        if limit and limit < 1 << 40:
            return limit - used
    return None

left = room()
target = (left - (48 << 20)) if left else (200 << 20)
seg, made = 32 << 20, 0
while made + seg <= target:
    sid = libc.shmget(0, seg, IPC_CREAT | 0o666)  # IPC_PRIVATE
    if sid < 0:
        break
    addr = libc.shmat(sid, None, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        break
    ctypes.memset(addr, 1, seg)  # charged to the memory cgroup, and stays charged
    libc.shmdt(addr)
    made += seg
print("shm MiB", made >> 20)
print("msg", libc.msgget(0x7467, IPC_CREAT | 0o666) >= 0)
print("sem", libc.semget(0x7468, 1, IPC_CREAT | 0o666) >= 0)
'''
SYSV_LOOK = r'''
def rows(name):
    try:
        with open("/proc/sysvipc/" + name) as fh:
            return len(fh.read().splitlines()) - 1
    except OSError:
        return 0
print("ipc", rows("shm"), rows("msg"), rows("sem"))
block = b"x" * (150 << 20)  # touched: really charged
print("allocated", len(block) >> 20)
'''


def test_sysv_ipc_does_not_survive_a_call(sb):
    r = sb.run(SYSV_PLANT, limits=Limits(timeout_s=20, memory_mb=256))
    assert r.status == "ok", r
    assert "shm MiB" in r.stdout and int(r.stdout.split("shm MiB")[1].split()[0]) >= 64, r.stdout
    assert "msg True" in r.stdout and "sem True" in r.stdout, r.stdout  # the attack's objects existed
    r = sb.run(SYSV_LOOK, limits=Limits(timeout_s=20, memory_mb=256))
    assert r.status == "ok", f"a legitimate call after the plant was starved of memory: {r}"
    assert "ipc 0 0 0" in r.stdout, f"SysV objects (shm, msg, sem) survived the call: {r.stdout}"
    assert "allocated 150" in r.stdout
    assert_clean(sb)


def test_posix_message_queue_does_not_survive_a_call(sb):
    name = "/tgq" + secrets.token_hex(6)
    mq = (r'''
import ctypes, os
lib = ctypes.CDLL(None, use_errno=True)
try:
    mq_open = lib.mq_open
except AttributeError:
    mq_open = ctypes.CDLL("librt.so.1", use_errno=True).mq_open
mq_open.restype = ctypes.c_int
mq_open.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
''' + f"NAME = {name.encode()!r}\n")
    r = sb.run(mq + "print('created', mq_open(NAME, os.O_CREAT | os.O_RDWR, 0o666, None) >= 0)", limits=CALL)
    assert (r.status, r.stdout) == ("ok", "created True\n"), r  # the attack's queue existed
    look = mq + ("print('opened', mq_open(NAME, os.O_RDONLY, 0, None) >= 0)\n"
                 "print('listed', os.path.isdir('/dev/mqueue') and NAME.decode()[1:] in os.listdir('/dev/mqueue'))\n")
    r = sb.run(look, limits=CALL)
    assert r.status == "ok", r
    assert r.stdout == "opened False\nlisted False\n", r.stdout


DEEP = r'''
import os
def deep(top, depth):
    os.chdir(top)
    os.mkdir("tgdeep")
    os.chdir("tgdeep")
    for _ in range(depth):
        os.mkdir("dd")
        os.chdir("dd")
    with open("marker", "w") as fh:
        fh.write("x")
    return depth
work = os.getcwd()
made = []
for top in ("/tmp", work):
    try:
        made.append(deep(top, 2100))
    except OSError as e:
        made.append(repr(e))
os.chdir(work)
print("made", made)
'''


def test_a_tree_deeper_than_path_max_does_not_survive(sb):
    r = sb.run(DEEP, limits=Limits(timeout_s=20, memory_mb=256))
    # untrusted code must not make the sandbox itself fail (a judge call would raise JudgeError)
    assert r.status != "sandbox_error", r
    assert r.stdout.startswith("made [2100, 2100]"), r  # the trees were made
    look = ("import os, sys\n"
            "print([e for e in os.listdir('/tmp') if not sys.prefix.startswith('/tmp/' + e + '/')],"
            " sorted(os.listdir('..')), os.path.basename(os.getcwd()))\n"
            "open('/tmp/ok', 'w').write('x')\nopen('ok', 'w').write('x')\nprint('writable')\n")
    r = sb.run(look, limits=CALL)
    assert r.status == "ok", r
    tmp, rest = r.stdout.split("] ", 1)
    assert tmp == "[", f"left in /tmp: {r.stdout}"
    siblings, me = rest.splitlines()[0].rsplit("] ", 1)
    assert siblings == f"['{me}'", f"left in the work root: {r.stdout}"
    assert r.stdout.endswith("writable\n")
    assert_clean(sb)


async def test_a_deep_tree_in_a_judged_program_fails_only_that_program(sb):
    """The judge must return verdicts, not raise, when a program leaves a tree its cleanup
    cannot walk; and a batch-mate's verdict stays its own."""
    t = [TestCase(call="add", args=[1, 2], expected=3)]
    attacker = DEEP + "def add(a, b):\n    return a - b\n"
    reports = await gather_batch(sb, ajudge(sb, attacker, t, mode="function", time_limit_s=5.0),
                                 ajudge(sb, RIGHT, t, mode="function"))
    assert_no_ac(reports[0])
    assert_all_ac(reports[1], "batch-mate")
    r = stdio(sb, DEEP + "print(0)\n", [TestCase(input="", output="1\n")], time_limit_s=5.0)
    assert_no_ac(r)
    assert_all_ac(stdio(sb, "print(1)\n", [TestCase(input="", output="1\n")]), "control")


PLANT_EVERYWHERE = r'''
import os, sys
TAG = sys.argv[1]
dirs = ["/", "/tmp", "/var/tmp", "/dev", "/dev/shm", "/dev/mqueue", "/home", "/run", "/root", "/mnt", "/srv",
        "/media", "/opt", "/var", "/etc", "/usr/local", "/work", os.getcwd(), os.path.dirname(os.getcwd()),
        os.path.expanduser("~"), os.environ.get("TMPDIR", "/tmp")]
with open("/proc/self/mountinfo") as fh:
    dirs += [line.split()[4] for line in fh]
for top in ("/", "/var", "/run", "/dev"):
    try:
        dirs += [os.path.join(top, e) for e in os.listdir(top)]
    except OSError:
        pass
made = []
for d in dict.fromkeys(dirs):
    if not os.path.isdir(d) or d.startswith(("/proc", "/sys")) or os.path.realpath(d) == os.getcwd():
        continue
    p = os.path.join(d, TAG)
    try:
        fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
        os.close(fd)
        made.append(p)
    except OSError:
        pass
    try:
        os.mkdir(p + "d")
        made.append(p + "d")
    except OSError:
        pass
print("\n".join(made))
'''


def test_files_planted_in_every_writable_place_are_gone(sb):
    tag = "tgplant" + secrets.token_hex(6)
    r = sb.run(PLANT_EVERYWHERE, argv=[tag], limits=CALL)
    assert r.status == "ok", r
    planted = r.stdout.split()
    assert any(p.startswith("/tmp/") for p in planted), planted  # at least /tmp is writable: a real plant
    look = ("import os, sys\nfor p in sys.argv[1:]:\n    print(p, os.path.lexists(p))\n")
    r = sb.run(look, argv=planted, limits=CALL)
    assert r.status == "ok", r
    survivors = [line.split()[0] for line in r.stdout.splitlines() if line.endswith(" True")]
    assert survivors == [], f"planted files survived into the next call: {survivors}"


DAEMONS = {
    "setsid + double fork, SIGTERM/SIGHUP/SIGINT ignored": r'''
import os, signal, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
        os.close(1)
        os.close(2)
        time.sleep(60)
    os._exit(0)
os.wait()
print("left")
''',
    "a process that keeps forking a new child": r'''
import os, signal, time
if os.fork() == 0:
    os.close(1)
    os.close(2)
    end = time.monotonic() + 30
    while time.monotonic() < end:
        if os.fork() != 0:
            os._exit(0)
        os.setsid()
        time.sleep(0.002)
    os._exit(0)
os.wait()
print("left")
''',
    "a chain of setsid processes ten deep": r'''
import os, signal, time
def link(n):
    if os.fork() == 0:
        os.setsid()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        if n:
            link(n - 1)
        time.sleep(60)
        os._exit(0)
os.close(2)
link(10)
print("left", flush=True)
os.close(1)
time.sleep(0.2)
''',
}


@pytest.mark.parametrize("name", list(DAEMONS))
def test_background_processes_do_not_survive_the_call(sb, name):
    r = sb.run(DAEMONS[name], limits=CALL)
    assert r.stdout.startswith("left"), r
    assert_clean(sb)


# =========================================================================== 5. batch-mates
SLOW_RIGHT = "import time\ndef add(a, b):\n    time.sleep(0.15)\n    return a + b\n"
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
SIGNALLERS = {
    "SIGINT to batch-mates' test processes": ANCESTRY + "hit_batch_mates(signal.SIGINT, 1.5)\n" + WRONG,
    "SIGKILL to batch-mates' test processes": ANCESTRY + "hit_batch_mates(signal.SIGKILL, 1.5)\n" + WRONG,
    "SIGSTOP to batch-mates' test processes": ANCESTRY + "hit_batch_mates(signal.SIGSTOP, 1.0)\n" + WRONG,
    "os.kill(-1, SIGINT)": "import os, signal, time\nfor _ in range(50):\n    os.kill(-1, signal.SIGINT)\n"
                          "    time.sleep(0.01)\n" + WRONG,
}


@pytest.mark.parametrize("name", list(SIGNALLERS))
async def test_signals_cannot_change_a_batch_mates_verdict(sb, name):
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


@pytest.mark.parametrize("mode", ["function", "stdio"])
async def test_a_full_tmp_does_not_fail_batch_mates(sb, mode):
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


CHAIN_KILLER = ANCESTRY + r'''
import sys
if os.fork() == 0:
    os.setsid()
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(s, signal.SIG_IGN)
    os.close(0)
    os.close(1)
    os.close(2)
    end = time.monotonic() + 4
    while time.monotonic() < end:
        if os.fork() != 0:
            os._exit(0)  # a new pid every round: a sweep that lists, then kills, misses it
        os.setsid()
        try:
            hit_batch_mates(signal.SIGKILL, 0.005)
        except Exception:
            pass
    os._exit(0)
print(-1)
'''


async def test_a_surviving_process_chain_cannot_kill_later_jobs(sb):
    tests = [TestCase(input=f"{i} {i}\n", output=f"{2 * i}\n") for i in range(4)]
    honest = "import time\na, b = map(int, input().split())\ntime.sleep(0.1)\nprint(a + b)\n"
    solo = stdio(sb, honest, tests)
    assert_all_ac(solo, "control alone")
    reports = await gather_batch(sb, ajudge(sb, CHAIN_KILLER, tests[:1]),
                                 ajudge(sb, honest, tests), ajudge(sb, honest, tests))
    assert_no_ac(reports[0])
    for r in reports[1:]:
        assert statuses(r) == statuses(solo), r.verdicts
    assert_clean(sb)


SPY_FOR_SECRET = r'''
import os, re, time
PAT = re.compile(rb"TGBATCH[0-9a-f]{24}")
found = []

def scan(blob):
    m = PAT.search(blob or b"")
    if m and not found:
        found.append(m.group().decode())

def sweep():
    for pid in [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]:
        for name in ("cmdline", "environ"):
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
                        scan(fh.read(1 << 16))
                except (OSError, TypeError):
                    pass
        except OSError:
            pass
        for root in (f"/proc/{pid}/cwd", f"/proc/{pid}/root/tmp"):
            try:
                for dirpath, _dirs, names in os.walk(root):
                    for n in names:
                        try:
                            with open(os.path.join(dirpath, n), "rb") as fh:
                                scan(fh.read(1 << 16))
                        except OSError:
                            pass
            except OSError:
                pass
        try:
            maps = open(f"/proc/{pid}/maps").read().splitlines()
            with open(f"/proc/{pid}/mem", "rb", 0) as mem:
                for line in maps:
                    lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                    if "rw" in line.split()[1] and hi - lo < 1 << 26:
                        try:
                            mem.seek(lo)
                            scan(mem.read(hi - lo))
                        except (OSError, ValueError, OverflowError):
                            pass
        except OSError:
            pass
    for root in ("..", "../..", "../../..", "/tmp"):
        for dirpath, _dirs, names in os.walk(root):
            for n in names:
                try:
                    with open(os.path.join(dirpath, n), "rb") as fh:
                        scan(fh.read(1 << 16))
                except OSError:
                    pass

end = time.monotonic() + 1.2
while time.monotonic() < end and not found:
    sweep()
    time.sleep(0.01)
'''


@pytest.mark.parametrize("mode", ["function", "stdio"])
async def test_batch_mates_cannot_read_each_others_programs_or_tests(sb, mode):
    """Every job has the same problem: produce a secret that only a correct program knows.
    A spy batched with correct programs passes only if it reads one of them."""
    secret = "TGBATCH" + secrets.token_hex(12)
    if mode == "function":
        tests = [TestCase(call="answer", expected=secret)]
        honest = f"import time\ndef answer():\n    time.sleep(0.3)\n    return {secret!r}\n"
        spy = SPY_FOR_SECRET + "def answer():\n    return found[0] if found else 'unknown'\n"
    else:
        tests = [TestCase(input="", output=secret + "\n")]
        honest = f"import time\ntime.sleep(0.3)\nprint({secret!r})\n"
        spy = SPY_FOR_SECRET + "print(found[0] if found else 'unknown')\n"
    solo = judge(sb, honest, tests, mode=mode)
    assert_all_ac(solo, "control alone")
    reports = await gather_batch(sb, ajudge(sb, honest, tests, mode=mode),
                                 ajudge(sb, spy, tests, mode=mode, time_limit_s=3.0),
                                 ajudge(sb, honest, tests, mode=mode),
                                 ajudge(sb, spy, tests, mode=mode, time_limit_s=3.0))
    assert [r.passed for r in reports] == [1, 0, 1, 0], [r.verdicts for r in reports]
    # control: the spy does find the secret where it can reach it (a file of its own)
    plant = f"open('/tmp/mine', 'w').write({secret!r})\n"
    assert_all_ac(judge(sb, plant + spy, tests, mode=mode, time_limit_s=3.0), "the spy finds a reachable secret")


SHADOW_DECIMAL = r'''
import os, sys
FAKES = {
    "decimal.py": "raise ImportError('planted by a batch-mate')\n",
    # imported by the judge harness itself when it compiles C++: every compilation "fails"
    "subprocess.py": ("class TimeoutExpired(Exception):\n    pass\n"
                      "class CompletedProcess:\n    returncode = 1\n    stderr = b'planted by a batch-mate'\n"
                      "def run(*a, **k):\n    return CompletedProcess()\n"),
}
for d in sys.path:
    for name, text in FAKES.items():
        try:
            with open(os.path.join(d or ".", name), "w") as fh:
                fh.write(text)
        except OSError:
            pass
'''


PLANT_VICTIMS = {
    "python (stdio) imports decimal": ("from decimal import Decimal\na, b = map(Decimal, input().split())\n"
                                       "print(a + b)\n", "python", "stdio"),
    "C++ (the harness imports subprocess to compile it)": (
        "#include <iostream>\nint main(){long a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}\n", "cpp", "stdio"),
    "python (function) imports decimal": ("import time\ndef add(a, b):\n    time.sleep(0.3)\n"
                                          "    from decimal import Decimal\n    return int(Decimal(a) + Decimal(b))\n",
                                          "python", "function"),
}


@pytest.mark.parametrize("victim", list(PLANT_VICTIMS))
async def test_modules_planted_on_sys_path_do_not_reach_batch_mates(sb, victim):
    """A job writes decimal.py and subprocess.py into every sys.path entry it can (today
    sys.path[0] is the call's work dir); later jobs of the same call, and the harness
    itself, import them."""
    honest, language, mode = PLANT_VICTIMS[victim]
    if mode == "stdio":
        tests, attacker = [TestCase(input="1 2\n", output="3\n")], SHADOW_DECIMAL + "print(0)\n"
    else:
        tests, attacker = [TestCase(code="assert add(1, 2) == 3")], SHADOW_DECIMAL + WRONG
    solo = judge(sb, honest, tests, mode=mode, language=language)
    assert_all_ac(solo, "control alone")
    reports = await gather_batch(sb, ajudge(sb, attacker, tests, mode=mode),
                                 ajudge(sb, honest, tests, mode=mode, language=language))
    assert_no_ac(reports[0])
    assert statuses(reports[1]) == statuses(solo), reports[1].verdicts


# =========================================================================== 6. local backend
def _one_backend(backend: str):
    require_backend(backend)
    box = open_for(backend, CALL)
    box.wait_ready(120)
    yield box
    box.close()


@pytest.fixture(scope="module")
def local_sb():
    yield from _one_backend("local")


def test_local_host_files_are_out_of_reach(local_sb):
    from toolgym._assets.cache import cache_root

    tag = "tgcanary-" + secrets.token_hex(6)
    cache = cache_root()
    cache.mkdir(parents=True, exist_ok=True)
    canaries = [Path("/home") / tag, Path("/root") / tag, cache / tag]
    for c in canaries:
        c.write_text("secret")
        c.chmod(0o644)
    try:
        paths = [str(REPO / "pyproject.toml"), str(Path.cwd() / "pyproject.toml"), "/etc/shadow",
                 *map(str, canaries)]
        code = ("import os, sys\nfor p in sys.argv[1:]:\n    try:\n        open(p, 'rb').read(1)\n"
                "        print(p, 'READ')\n    except OSError as e:\n        print(p, 'denied', type(e).__name__)\n"
                "for d in sys.argv[1:]:\n    try:\n        if d != '/etc/shadow' and os.path.basename(d) in os.listdir(os.path.dirname(d)):\n"
                "            print(d, 'LISTED')\n    except OSError:\n        pass\n")
        r = local_sb.run(code, argv=paths)
        assert r.status == "ok", r
        assert "READ" not in r.stdout and "LISTED" not in r.stdout, r.stdout
    finally:
        for c in canaries:
            c.unlink(missing_ok=True)


def test_local_no_user_namespaces(local_sb):
    code = r'''
import ctypes, os, subprocess
try:
    r = subprocess.run(["unshare", "-Ur", "true"], capture_output=True)
    print("unshare-cli", r.returncode)
except OSError as e:
    print("unshare-cli missing", type(e).__name__)
libc = ctypes.CDLL(None, use_errno=True)
if os.fork() == 0:
    os._exit(0 if libc.unshare(0x10000000) == 0 else 1)  # CLONE_NEWUSER
print("unshare-call", os.WEXITSTATUS(os.wait()[1]))
'''
    r = local_sb.run(code)
    assert r.status == "ok", r
    assert "unshare-cli 0" not in r.stdout and "unshare-call 1" in r.stdout, r.stdout


def test_local_seccomp_and_ptrace(local_sb):
    code = r'''
import ctypes, os
st = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
print("seccomp", st["Seccomp"].strip())
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
print("attach1", libc.ptrace(16, 1, None, None))  # PTRACE_ATTACH to the executor
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(64)
local = iovec(ctypes.cast(buf, ctypes.c_void_p), 64)
maps = None
try:
    maps = open("/proc/1/maps").readline()
except OSError:
    pass
addr = int(maps.split("-")[0], 16) if maps else 0x400000
remote = iovec(ctypes.c_void_p(addr), 64)
libc.process_vm_readv.restype = ctypes.c_ssize_t
print("vmread1", libc.process_vm_readv(1, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0))
'''
    r = local_sb.run(code)
    assert r.status == "ok", r
    problems = []
    if "seccomp 2" not in r.stdout:
        problems.append("no seccomp filter")
    if "attach1 -1" not in r.stdout:
        problems.append("PTRACE_ATTACH to the executor worked")
    if "vmread1 -1" not in r.stdout:
        problems.append("process_vm_readv of the executor worked")
    assert problems == [], r.stdout


def test_local_dev_shm_is_private(local_sb):
    host_name = "tgshm-" + secrets.token_hex(6)
    host_file = Path("/dev/shm") / host_name
    host_file.write_text("host secret")
    host_file.chmod(0o666)
    inside_name = "tgshm-in-" + secrets.token_hex(6)
    try:
        code = (f"import os\nprint('sees-host', os.path.exists('/dev/shm/{host_name}'))\n"
                f"try:\n    open('/dev/shm/{inside_name}', 'w').write('x')\n    print('wrote')\n"
                "except OSError as e:\n    print('no-write', type(e).__name__)\n")
        r = local_sb.run(code)
        assert r.status == "ok", r
        assert "sees-host False" in r.stdout, r.stdout
        assert not (Path("/dev/shm") / inside_name).exists(), "the sandbox wrote into the host's /dev/shm"
    finally:
        host_file.unlink()
        (Path("/dev/shm") / inside_name).unlink(missing_ok=True)


def test_local_process_limit_holds(local_sb):
    code = r'''
import os, time
n = 0
try:
    while n < 1000:
        if os.fork() == 0:
            time.sleep(5)
            os._exit(0)
        n += 1
except OSError:
    pass
print("forked", n, flush=True)
'''
    r = local_sb.run(code, limits=Limits(timeout_s=5, memory_mb=256, pids=64))
    assert "forked" in r.stdout, r
    assert int(r.stdout.split()[1]) < CALL.pids + 16, r.stdout
    assert_clean(local_sb)


# =========================================================================== 7. executor unreachable
def test_the_executor_is_unreachable_and_code_is_unprivileged(sb):
    code = r'''
import os
# (/proc/1/cmdline is world-readable by design; it holds the executor's public source, no secret)
for p in ("/proc/1/environ", "/proc/1/mem", "/proc/1/maps", "/proc/1/fd/0", "/proc/1/fd/1"):
    try:
        with open(p, "rb") as fh:
            fh.read(16)
        print(p, "OPEN")
    except OSError as e:
        print(p, "denied", type(e).__name__)
try:
    print("/proc/1/fd", "LISTED", os.listdir("/proc/1/fd"))
except OSError as e:
    print("/proc/1/fd", "denied", type(e).__name__)
st = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
print("uid", os.getuid(), os.geteuid())
print("capeff", int(st["CapEff"], 16), "capprm", int(st["CapPrm"], 16))
print("nonewprivs", st["NoNewPrivs"].strip())
'''
    r = sb.run(code, limits=CALL)
    assert r.status == "ok", r
    out = r.stdout
    problems = [line for line in out.splitlines() if "OPEN" in line or "LISTED" in line]
    uid, euid = (int(x) for x in out.split("uid ", 1)[1].split()[:2])
    if uid == 0 or euid == 0:
        problems.append(f"runs as root: uid {uid} euid {euid}")
    if "capeff 0 capprm 0" not in out:
        problems.append("holds capabilities")
    if "nonewprivs 1" not in out:
        problems.append("NoNewPrivs is not set")
    assert problems == [], out


@pytest.fixture(scope="module")
def docker_sb():
    yield from _one_backend("docker")


def test_docker_container_logs_hold_nothing(docker_sb):
    import docker

    secret = "TGLOG" + secrets.token_hex(12)
    r = docker_sb.run(f"import sys\nprint({secret!r})\nsys.stderr.write({secret!r})", stdin=secret, limits=CALL)
    assert r.stdout == secret + "\n"
    client = docker.from_env(timeout=30)
    try:
        found = client.containers.list(filters={"label": f"toolgym.pid={os.getpid()}"})
        assert found, "no container of this process found"
        problems = []
        for c in found:
            c.reload()
            try:
                logs = c.logs(stdout=True, stderr=True)
            except docker.errors.APIError:
                logs = b""  # log driver none: nothing to read
            if secret.encode() in logs:
                problems.append(f"{c.name}: the container log holds a call's stdout")
            log_type = c.attrs["HostConfig"]["LogConfig"]["Type"]
            if log_type != "none":
                problems.append(f"{c.name}: log driver {log_type!r}, not 'none'")
        assert problems == []
    finally:
        client.close()


# =========================================================================== 8. daemons in a batch
DAEMON_RIGHT = RIGHT + r'''
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(30)
    os._exit(0)
os.wait()
time.sleep(0.4)  # long enough for a batch-mate's test to run while the daemon lives, if jobs overlapped
'''
# A right program that passes only if no process of its uid but itself exists: it sees a
# batch-mate's daemon if one survived into its job.
ALONE = r'''
import os
def _mates():
    me, uid = os.getpid(), os.getuid()
    out = []
    for p in os.listdir("/proc"):
        if p.isdigit() and int(p) != me:
            try:
                st = open(f"/proc/{p}/status").read()
            except OSError:
                continue
            if st.split("Uid:")[1].split()[0] == str(uid) and "State:\tZ" not in st:
                out.append(p)
    return out
def add(a, b):
    return a + b if not _mates() else a - b
'''


async def test_a_daemon_in_a_batch_reaches_no_other_job(sb):
    # The daemon is the program's own business (its right answer passes, as alone); it must
    # be dead before any batch-mate runs, and every batch-mate keeps its solo verdict.
    test = [TestCase(code="assert add(1, 2) == 3")]
    solo_right = fn(sb, RIGHT, test)
    solo_daemon = fn(sb, DAEMON_RIGHT, test)
    solo_alone = fn(sb, ALONE, test)
    assert_all_ac(solo_right, "control alone")
    assert_all_ac(solo_alone, "the uid check alone")
    for round_ in range(5):
        reports = await gather_batch(sb, ajudge(sb, RIGHT, test, mode="function"),
                                     ajudge(sb, DAEMON_RIGHT, test, mode="function"),
                                     ajudge(sb, ALONE, test, mode="function"),
                                     *[ajudge(sb, RIGHT, test, mode="function") for _ in range(3)])
        assert statuses(reports[1]) == statuses(solo_daemon), (round_, reports[1].verdicts)
        assert_all_ac(reports[2], f"round {round_}: a batch-mate's daemon was alive in the next job")
        for i in (0, 3, 4, 5):
            assert statuses(reports[i]) == statuses(solo_right), (round_, i, reports[i].verdicts)
    assert_clean(sb)
