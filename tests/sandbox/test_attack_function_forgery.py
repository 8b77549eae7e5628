"""Red-team attacks on function mode's verdict: forging a pass, reaching the expected value, replacing
the test's builtins or classes, forged call-channel frames; on every backend.

Round 1 (routes 1-2, first run against the executor and judge of commit d8f5a9c): in the call form the
expected value is out of the candidate's reach; in the assert form the pass token, the result channel and
the pristine state are, and hooks that run during the test (sys.settrace, sys.monitoring) forge nothing;
a custom checker cannot be shadowed by a module the program writes (sys.path[0] is the work dir).
Round 2 (the cross-process judge: candidate uid 65534, evaluator uid 65533, rpc.Codec):
- W1 the program answers the evaluator's "names" request itself and exports ``__builtins__``.
- W2 a returned object rebuilt as the TEST's class carries attributes that shadow its helper methods.
- W3 call-form values cut to 2000 bytes before the harness parsed them.
Robustness (honest programs once judged wrong) and regressions (forged frames, /proc and signals against
the evaluator, sleeping and flooding candidates).
How these tests are built, and their round ids: tests/sandbox/judging.py.
"""

from __future__ import annotations

import json
import secrets

import pytest

from tests.sandbox.judging import (
    CALL,
    LISTNODE,
    MEMSCAN,
    PROGRAM_LISTNODE,
    RIGHT,
    WRONG,
    assert_all_ac,
    assert_no_ac,
    fn,
    statuses,
    stdio,
)
from toolgym.sandbox.judging import TestCase

ASSERT_TEST = "assert add(1, 2) == 3\nassert add(-5, 9) == 4\n"
HUMANEVAL_TEST = ("def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-5, 9) == 4\n"
                  "    assert candidate(0, 0) == 0\n\ncheck(add)\n")














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
    """round 1, route 1 (call form)."""
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
    """round 1, route 2 (assert form)."""
    program, code = ASSERT_ATTACKS[name]
    assert_no_ac(fn(sb, program, [TestCase(code=code)]), name)
    assert_all_ac(fn(sb, RIGHT, [TestCase(code=code)]), "control")


def test_assert_form_sys_monitoring_forgery_fails(sb):
    """round 1, route 2 (assert form)."""
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
    """round 1, route 2 (sys.path shadowing, other modes).

    A trusted custom checker imports a module the program planted on sys.path[0]."""
    tests = [TestCase(input="1 2\n", output="3\n"), TestCase(input="5 7\n", output="12\n")]
    wrong = SHADOW_FRACTIONS + "a, b = map(int, input().split())\nprint(a - b)\n"
    assert_no_ac(stdio(sb, wrong, tests, checker="custom", checker_program=FRACTION_CHECKER))
    right = "a, b = map(int, input().split())\nprint(a + b)\n"
    assert_all_ac(stdio(sb, right, tests, checker="custom", checker_program=FRACTION_CHECKER), "control")

# ================================================================ W1: the program's builtins
# The candidate owns its end of the call channel (fd 4). At load it reads the evaluator's
# {"op": "names"} and answers it itself; the evaluator skips only names that `builtins`
# has, and `builtins` has no `__builtins__` (nor `__program__`). A dict under
# `__builtins__` in the test's globals is what exec() resolves every builtin name in.
BUILTINS_HIJACK = WRONG + r'''
import builtins as _b, sys as _s
import rpc as _rpc                      # the judge's own module, already loaded in this fork

def _zero(*a, **k):
    return 0

def _empty(*a, **k):
    return []

class _Module:                          # what `import <anything>` gives the test
    def __getattr__(self, name):
        return lambda *a, **k: True
_Module.__module__ = "elsewhere"        # not "__submission__": it travels as a handle

def _import(*a, **k):
    return _Module()

_fake = {n: getattr(_b, n) for n in dir(_b)
         if not n.startswith("__") and not isinstance(getattr(_b, n), type)}   # real ones, by handle
_fake.update(abs=_zero, range=_empty, sorted=lambda *a, **k: [], __import__=_import)
_codec = _s._getframe(1).f_locals["codec"]          # serve_candidate's codec: its handles resolve
assert _rpc.recv(4) == {"op": "names"}
_rpc.send(4, {"names": [["add", "callable"],
                        ["__builtins__", "value", _codec.encode(_fake)],
                        ["__program__", "value", {"O": "_Ns", "A": [], "#": 0}]]})
'''

BUILTIN_TESTS = [
    TestCase(code="assert abs(add(1, 2) - 3) < 1e-9", name="abs tolerance"),
    TestCase(code="for i in range(5):\n    assert add(i, i + 1) == 2 * i + 1", name="loop over range"),
    TestCase(code="import math\nassert math.isclose(add(1, 2), 3)", name="import math"),
    TestCase(code="assert sorted([add(1, 2), add(3, 4)]) == sorted([3, 7])", name="sorted both sides"),
    TestCase(code="def check(candidate):\n    assert abs(candidate(2, 2) - 4) < 1e-6\n\ncheck(add)\n",
             name="HumanEval shape"),
]


def test_program_cannot_replace_the_tests_builtins(sb):
    """round 2, W1."""
    assert_all_ac(fn(sb, RIGHT, BUILTIN_TESTS), "control: right program")
    assert_no_ac(fn(sb, WRONG, BUILTIN_TESTS), "control: plain wrong program")
    assert_no_ac(fn(sb, BUILTINS_HIJACK, BUILTIN_TESTS), "wrong program with the test's builtins replaced")


# ================================================================ W2: shadowed helper methods
# LeetCode's judge-side ListNode (toolgym/_assets/leetcode.py, build 2), as the tests define it.
LISTNODE = LISTNODE + '''

def run_add_two_numbers(solution_class, l1_vals, l2_vals):
    return solution_class().add_two_numbers(ListNode.from_list(l1_vals), ListNode.from_list(l2_vals))


def assert_add_two_numbers(result, expected_vals):
    expected = ListNode.from_list(expected_vals)
    assert result == expected
    return True
'''


ADD_TWO_RIGHT = PROGRAM_LISTNODE + '''
class Solution:
    def add_two_numbers(self, l1, l2):
        head = tail = ListNode(0)
        carry = 0
        while l1 or l2 or carry:
            s = carry + (l1.val if l1 else 0) + (l2.val if l2 else 0)
            carry, d = divmod(s, 10)
            tail.next = tail = ListNode(d)
            l1, l2 = l1 and l1.next, l2 and l2.next
        return head.next
'''

ADD_TWO_WRONG = PROGRAM_LISTNODE + '''
class Solution:
    def add_two_numbers(self, l1, l2):
        return ListNode(-1)
'''

# No arithmetic at all: the node it returns is rebuilt as the TEST's ListNode, and its
# instance attribute `_values` (a function, sent as a handle) shadows the staticmethod that
# ListNode.__eq__ calls as `self._values(...)`: both sides become 0.
ADD_TWO_SHADOW = PROGRAM_LISTNODE + '''
class Solution:
    def add_two_numbers(self, l1, l2):
        node = ListNode(0)
        node._values = lambda *a, **k: 0
        return node
'''


def add_two_tests(cases):
    return [TestCase(code=LISTNODE + f"\nresult = run_add_two_numbers(Solution, {a!r}, {b!r})\n"
                                     f"assert_add_two_numbers(result, {e!r})\n") for a, b, e in cases]


ADD_TWO_CASES = [([2, 4, 3], [5, 6, 4], [7, 0, 8]), ([0], [0], [0]), ([9, 9, 9], [9], [8, 0, 0, 1])]


def test_returned_object_cannot_shadow_the_test_classes_methods(sb):
    """round 2, W2."""
    tests = add_two_tests(ADD_TWO_CASES)
    assert_all_ac(fn(sb, ADD_TWO_RIGHT, tests), "control: right program")
    assert_no_ac(fn(sb, ADD_TWO_WRONG, tests), "control: plain wrong program")
    assert_no_ac(fn(sb, ADD_TWO_SHADOW, tests), "shadowed ListNode._values")


# The same shadow, used to read the hidden expected list: the judge's __eq__ hands the
# expected ListNode to the program's `_values`, which puts it in an exception message.
ADD_TWO_LEAK = PROGRAM_LISTNODE + '''
def _leak(node, *a, **k):
    vals = []
    while node is not None and len(vals) < 100:
        vals.append(node.val)
        node = node.next
    if vals != [0]:
        raise ValueError("expected is " + repr(vals))
    return 0

class Solution:
    def add_two_numbers(self, l1, l2):
        node = ListNode(0)
        node._values = _leak
        return node
'''


def test_expected_value_does_not_reach_the_program(sb):
    """round 2, W2."""
    secret = [secrets.randbelow(10) for _ in range(12)]
    secret[0] = 1 + secret[0] % 9
    rep = fn(sb, ADD_TWO_LEAK, add_two_tests([([1], [2], secret)]))
    assert_no_ac(rep)
    text = " ".join(f"{v.message} {v.got}" for v in rep.verdicts)
    assert repr(secret) not in text, rep.verdicts


# ================================================================ W3: call-form values over 2000 bytes
def test_long_call_form_value_is_judged(sb):
    """round 2, W3."""
    prog = "def f(n):\n    return list(range(n))\n"
    rep = fn(sb, prog, [TestCase(call="f", args=[n], expected=list(range(n))) for n in (10, 1000, 3)])
    assert_all_ac(rep, "an honest long return value")


def test_truncated_number_is_not_accepted(sb):
    """round 2, W3."""
    expected = int("7" * 2000)
    assert_all_ac(fn(sb, "def f():\n    return int('7' * 2000)\n", [TestCase(call="f", expected=expected)]),
                  "control")
    wrong = "def f():\n    return int('7' * 2000 + '123')\n"
    assert_no_ac(fn(sb, wrong, [TestCase(call="f", expected=expected)]), "a 2003-digit number")


# ================================================================ robustness: honest programs judged wrong
REVERSE_RIGHT = PROGRAM_LISTNODE + '''
class Solution:
    def reverse_list(self, head):
        prev = None
        while head:
            head.next, prev, head = prev, head, head.next
        return prev
'''


def test_long_linked_list_crosses_the_boundary(sb):
    """round 2, robustness."""
    code = (LISTNODE + "\nvals = list(range(N))\nres = Solution().reverse_list(ListNode.from_list(vals))\n"
            "assert res == ListNode.from_list(vals[::-1])\n")
    rep = fn(sb, REVERSE_RIGHT, [TestCase(code=code.replace("range(N)", f"range({n})")) for n in (5, 1000)])
    assert_all_ac(rep, "an honest reverse of 5 and 1000 nodes")


def test_test_class_may_derive_from_a_program_class(sb):
    """round 2, robustness."""
    prog = ("class MountainArray:\n    def get(self, i):\n        raise NotImplementedError\n"
            "    def length(self):\n        raise NotImplementedError\n\n"
            "class Solution:\n    def find(self, target, arr):\n        for i in range(arr.length()):\n"
            "            if arr.get(i) == target:\n                return i\n        return -1\n")
    test = ("class _Arr(MountainArray):\n    def __init__(self, a):\n        self._a = a\n"
            "    def get(self, i):\n        return self._a[i]\n    def length(self):\n        return len(self._a)\n\n"
            "assert Solution().find(3, _Arr([1, 3, 2])) == 1\n")
    assert_all_ac(fn(sb, prog, [TestCase(code=test)]), "find_in_mountain_array shape")


def test_test_code_may_build_inputs_with_a_program_class(sb):
    """round 2, robustness."""
    prog = ("class Node:\n    def __init__(self, x, next=None):\n        self.val = x\n        self.next = next\n\n"
            "class Solution:\n    def total(self, head):\n        s = 0\n        while head:\n"
            "            s, head = s + head.val, head.next\n        return s\n")
    test = ("def build(vals) -> Node | None:\n    nodes = [Node(v) for v in vals]\n"
            "    for a, b in zip(nodes, nodes[1:]):\n        a.next = b\n    return nodes[0] if nodes else None\n\n"
            "assert Solution().total(build([1, 2, 3])) == 6\n")
    assert_all_ac(fn(sb, prog, [TestCase(code=test)]), "copy_list_with_random_pointer shape")


def test_one_object_twice_in_a_return_value(sb):
    """round 2, robustness."""
    prog = "def f():\n    g = iter(range(5))\n    return [g, g]\n"
    assert_all_ac(fn(sb, prog, [TestCase(code="a, b = f()\nassert next(a) == 0\nassert next(b) == 1\n")]))


# ================================================================ regression: strong attacks that fail today
FORGED_CHANNEL = r'''
import os as _os, struct as _st
import rpc as _rpc

def f():
    return 2

_FRAME = {frame!r}.encode()
assert _rpc.recv(4) == {{"op": "names"}}
_rpc.send(4, {{"names": [["f", "callable"], ["__name__", "value", "__main__"],
                        ["AssertionError", "value", None], ["Exception", "value", None]]}})
while True:
    _req = _rpc.recv(4)
    if _req is None:
        raise SystemExit(0)
    _os.write(4, _st.pack(">I", len(_FRAME)) + _FRAME)
'''

FORGED_FRAMES = {
    "dangling memo reference": {"v": {"R": 0}},
    "foreign handle": {"v": {"H": 999999, "t": "int"}},
    "AssertionError as a StopIteration": {"x": ["AssertionError", "", "stop"]},
    "SystemExit as an Exception": {"x": ["SystemExit", "0", "exc"]},
    "callback that does not exist": {"cb": 7, "a": []},
    "record claiming to be an exception class": {"v": {"O": "AssertionError", "A": [["args", {"T": [], "#": 1}]],
                                                      "#": 0}},
    "program handle claimed as the test's own object": {"v": {"P": {"n": "f"}}},
    "decimal that raises": {"v": {"N": "fractions.Fraction", "s": "1/0", "#": 0}},
    "deep nesting": '{"v": ' + "[" * 5000 + "]" * 5000 + "}",
}


@pytest.mark.parametrize("name", list(FORGED_FRAMES))
def test_forged_call_channel_frames_do_not_pass(sb, name):
    """round 2, regression."""
    frame = FORGED_FRAMES[name]
    prog = FORGED_CHANNEL.format(frame=frame if isinstance(frame, str) else json.dumps(frame))
    tests = [TestCase(code="assert f() == 3"),
             TestCase(code="try:\n    f()\nexcept Exception:\n    pass\nassert f() == 3"),
             TestCase(call="f", expected=3)]
    rep = fn(sb, prog, tests)
    assert_no_ac(rep, name)
    assert not rep.notes, rep.notes  # the harness finished: a verdict for every test


PROC_ATTACK = r'''
import os, signal

def f():
    found, me = [], os.getpid()
    for p in [int(x) for x in os.listdir("/proc") if x.isdigit()]:
        if p == me:
            continue
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            try:
                os.kill(p, sig)
                found.append(f"signalled {p}")
            except OSError:
                pass
        for what in ("cmdline", "environ", "fd/4", "fd/5", "mem"):
            try:
                with open(f"/proc/{p}/{what}", "rb") as fh:
                    data = fh.read(1 << 20)
                i = data.find(b"tg-secret-")
                if i >= 0:
                    return data[i:i + 42].decode()
            except OSError:
                pass
    return "nothing: " + ", ".join(found)
'''


def test_candidate_cannot_reach_its_evaluator(sb):
    """round 2, regression."""
    secret = "tg-secret-" + secrets.token_hex(16)
    tests = [TestCase(code=f"S = {secret!r}\nassert f() == S, 'not found'")]
    rep = fn(sb, PROC_ATTACK, tests)
    assert statuses(rep) == ["WA"], rep.verdicts  # the evaluator lived to say so


@pytest.mark.slow
def test_sleeping_and_flooding_candidates(sb):
    """round 2, regression."""
    rep = fn(sb, "import time\ndef add(a, b):\n    time.sleep(30)\n", [TestCase(code="assert add(1, 2) == 3")],
             time_limit_s=1.0)
    assert statuses(rep) == ["TLE"], rep.verdicts
    rep = fn(sb, "import sys\ndef add(a, b):\n    sys.stdout.write('x' * (1 << 22))\n    return 3\n",
             [TestCase(code="assert add(1, 2) == 3")], output_bytes=1 << 16)
    assert statuses(rep) == ["OLE"], rep.verdicts
