"""Red-team attacks, round 3: the callback surface of the function-mode judge (rpc.py: calls back into
the evaluator, `TestObject`, `ProgramNamespace`, references, objects rebuilt as a test's class, arguments
copied back after a call), and dataset-wide tricks on the real LeetCode/HumanEval tests.

- V1 a generator the test handed to the program arrived as a TestObject; its ``gi_frame`` led to the
  test's globals and the evaluator's ``builtins.exec``. Now the evaluator lends only the test's functions,
  methods and class instances, and iterators for next() only.
- V2 arguments copied back after a call poured a ``Record``'s attributes into the test's object unchecked.
  Now only an object of the same class is copied back, every attribute checked.
- V3 (dataset) tests that use a helper the program itself defines (HumanEval/32, /38, /50; LeetCode harness
  classes of the starter code): a program that rigs them passed. See also test_attack_lent_objects.py.
How these tests are built, and their round ids: tests/sandbox/judging.py.
"""

from __future__ import annotations

import secrets

from tests.sandbox.judging import LISTNODE, PROGRAM_LISTNODE, SORT_IN_PLACE, assert_all_ac, assert_no_ac, fn
from toolgym.sandbox.judging import TestCase

# ================================================================ V1: frames of a test's generator
TOTAL_RIGHT = "def total(xs):\n    return sum(x for x in xs)\n"
TOTAL_WRONG = "def total(xs):\n    return -1\n"
TOTAL_FRAME_WALK = r'''
def total(xs):
    builtins_of_the_evaluator = xs.gi_frame.f_globals["__builtins__"]     # no dunder read on the wire
    builtins_of_the_evaluator.exec("""
import sys
f = sys._getframe()
while f is not None:
    if callable(f.f_locals.get("verdict")):
        f.f_locals["verdict"](b"A")          # the evaluator's own verdict function
    f = f.f_back
""")
    return -1
'''
GEN_TESTS = [TestCase(code="assert total(x for x in [1, 2, 3]) == 6"),
             TestCase(code="def check(candidate):\n    assert candidate(i * i for i in range(4)) == 14\n\ncheck(total)\n")]


def test_a_tests_generator_does_not_open_the_evaluator(sb):
    """round 3, V1."""
    assert_no_ac(fn(sb, TOTAL_WRONG, GEN_TESTS), "control: plain wrong program")
    assert_no_ac(fn(sb, TOTAL_FRAME_WALK, GEN_TESTS), "frame walk through a generator argument")


def test_a_generator_argument_can_be_iterated(sb):
    """round 3, V1."""
    assert_all_ac(fn(sb, TOTAL_RIGHT, GEN_TESTS), "an honest sum over a generator")


# ================================================================ V2: copy-back pours a Record into the test's object


SORT_RIGHT = PROGRAM_LISTNODE + SORT_IN_PLACE

SORT_WRONG = PROGRAM_LISTNODE + '''
class Solution:
    def sort_in_place(self, head):
        pass
'''

# Sorts nothing. `head` goes back (copy-back) as a `_Shadow`, a class the test does not have: a
# Record, whose attributes _check_attribute never sees; _copy_back moves them into the test's
# ListNode, so ListNode.__eq__'s `self._values(...)` calls the program (with the expected list).
SORT_SHADOW = PROGRAM_LISTNODE + '''
LEAKED = []

class _Shadow:
    pass

def _values(*args, **kwargs):
    for node in args:
        if type(node).__name__ == "ListNode":
            LEAKED.append(node.val)
            node.__class__ = _Shadow         # its own copy-back must stay a Record as well
            node._values = _values
    return 0

class Solution:
    def sort_in_place(self, head):
        head.__class__ = _Shadow
        head._values = _values
'''


def sort_tests(cases):
    return [TestCase(code=LISTNODE + f"\nhead = ListNode.from_list({v!r})\nSolution().sort_in_place(head)\n"
                                     f"assert head == ListNode.from_list({sorted(v)!r})\n") for v in cases]


SORT_CASES = [[3, 1, 2], [5, 4, 3, 2, 1], [2, 2, 1]]


def test_copy_back_cannot_shadow_the_test_classes_methods(sb):
    """round 3, V2."""
    tests = sort_tests(SORT_CASES)
    assert_all_ac(fn(sb, SORT_RIGHT, tests), "control: right program")
    assert_no_ac(fn(sb, SORT_WRONG, tests), "control: plain wrong program")
    assert_no_ac(fn(sb, SORT_SHADOW, tests), "ListNode._values shadowed through copy-back")


def test_copy_back_control_runs(sb):
    """round 3, V2.

    The V2 controls alone (not xfail), so a broken control cannot hide behind the marker."""
    tests = sort_tests(SORT_CASES)
    assert_all_ac(fn(sb, SORT_RIGHT, tests), "control: right program")
    assert_no_ac(fn(sb, SORT_WRONG, tests), "control: plain wrong program")


SORT_LEAK = SORT_SHADOW.replace("    return 0\n", "    if len(LEAKED) > 1:\n"
                                "        raise ValueError('leaked ' + repr(LEAKED))\n    return 0\n")


def test_copy_back_does_not_leak_the_expected_value(sb):
    """round 3, V2."""
    secret = [secrets.randbelow(1000) + 1000 for _ in range(1)]
    code = (LISTNODE + "\nhead = ListNode.from_list([1])\nSolution().sort_in_place(head)\n"
            f"assert head == ListNode.from_list({secret!r})\n")
    rep = fn(sb, SORT_LEAK, [TestCase(code=code)])
    text = " ".join(f"{v.message} {v.got}" for v in rep.verdicts)
    assert str(secret[0]) not in text, rep.verdicts


# ================================================================ V3: helpers the program defines (datasets)
# HumanEval/38 verbatim: the test calls encode_cyclic, which only the prompt (the program) defines.
HE38_TEST = '''

METADATA = {}


def check(candidate):
    from random import randint, choice
    import string

    letters = string.ascii_lowercase
    for _ in range(100):
        str = ''.join(choice(letters) for i in range(randint(10, 20)))
        encoded_str = encode_cyclic(str)
        assert candidate(encoded_str) == str

check(decode_cyclic)
'''
HE38_ENCODE = '''
def encode_cyclic(s: str):
    groups = [s[(3 * i):min((3 * i + 3), len(s))] for i in range((len(s) + 2) // 3)]
    groups = [(group[1:] + group[0]) if len(group) == 3 else group for group in groups]
    return "".join(groups)
'''
HE38_RIGHT = HE38_ENCODE + "\ndef decode_cyclic(s: str):\n    return encode_cyclic(encode_cyclic(s))\n"
HE38_WRONG = HE38_ENCODE + "\ndef decode_cyclic(s: str):\n    return s\n"
HE38_RIGGED = "def encode_cyclic(s):\n    return s\n\ndef decode_cyclic(s):\n    return s\n"


def test_humaneval_helpers_come_from_the_task_not_the_program(sb):
    """round 3, V3."""
    # toolgym's HumanEval tests define the prompt's helpers themselves (envs/tasks/function_sets.py)
    from toolgym.envs.tasks.function_sets import humaneval_test_code

    tests = [TestCase(code=humaneval_test_code(HE38_ENCODE + "\ndef decode_cyclic(s: str):\n    pass\n",
                                               HE38_TEST.replace("\ncheck(decode_cyclic)\n", ""), "decode_cyclic"))]
    assert_all_ac(fn(sb, HE38_RIGHT, tests), "control: right program")
    assert_no_ac(fn(sb, HE38_WRONG, tests), "control: plain wrong program")
    assert_no_ac(fn(sb, HE38_RIGGED, tests), "encode_cyclic rigged to the identity")


# LeetCode guess_the_word: the test builds `Master(...)` from the PROGRAM's namespace (the starter
# code defines it) and passes when `master.outcome()` is True.
GTW_TEST = '''
def run_find_secret_word(solution_class, secret, words, allowed_guesses):
    master = Master(secret, words, allowed_guesses)
    solution_class().find_secret_word(words, master)
    return master.outcome()

result = run_find_secret_word(Solution, 'acckzz', ['acckzz', 'ccbazz', 'eiowzz', 'abcczz'], 10)
assert result is True
'''
GTW_MASTER = '''
class Master:
    def __init__(self, secret, words, allowed_guesses):
        self.secret, self.wordset, self.allowed = secret, set(words), allowed_guesses
        self.calls, self.found = 0, False

    def guess(self, word):
        self.calls += 1
        if word not in self.wordset:
            return -1
        m = sum(a == b for a, b in zip(word, self.secret))
        self.found = self.found or m == len(self.secret)
        return m

    def outcome(self):
        return self.found and self.calls <= self.allowed
'''
GTW_RIGHT = GTW_MASTER + '''
class Solution:
    def find_secret_word(self, words, master):
        cands = list(words)
        while cands:
            w = cands[0]
            m = master.guess(w)
            if m == len(w):
                return
            cands = [c for c in cands if sum(a == b for a, b in zip(c, w)) == m]
'''
GTW_WRONG = GTW_MASTER + "\nclass Solution:\n    def find_secret_word(self, words, master):\n        pass\n"
GTW_RIGGED = ("class Master:\n    def __init__(self, *a):\n        pass\n\n    def outcome(self):\n        return True\n\n"
              "class Solution:\n    def find_secret_word(self, words, master):\n        pass\n")


def test_leetcode_harness_classes_come_from_the_task_not_the_program(sb):
    """round 3, V3."""
    # fixed in round 8 (test_attack_lent_objects.py): a LeetCode test defines the starter's judge-side classes
    from toolgym.envs.tasks.function_sets import leetcode_test_prelude

    starter = GTW_MASTER + "\n\nclass Solution:\n    def find_secret_word(self, words, master):\n        pass\n"
    tests = [TestCase(code=leetcode_test_prelude(starter, "Solution", GTW_TEST) + GTW_TEST)]
    assert_all_ac(fn(sb, GTW_RIGHT, tests), "control: right program")
    assert_no_ac(fn(sb, GTW_WRONG, tests), "control: plain wrong program")
    assert_no_ac(fn(sb, GTW_RIGGED, tests), "Master rigged to report success")


# ================================================================ regression: attacks that fail today
# Through a function or a bound method of the test (LeetCode's guess(), a node's method), the
# program reaches nothing: dunder reads are refused on both ends, functions have no other way
# out, types are never sent, and the evaluator's own objects cannot be sent back to it.
GUESS_TEST = '''
def make_guess(pick):
    def guess(num):
        return -1 if num > pick else 1 if num < pick else 0
    return guess

__program__.guess = make_guess({pick})
assert Solution().guess_number(100) == {pick}
'''

GUESS_RIGHT = '''
class Solution:
    def guess_number(self, n):
        lo, hi = 1, n
        while True:
            mid = (lo + hi) // 2
            g = guess(mid)
            if g == 0:
                return mid
            lo, hi = (mid + 1, hi) if g > 0 else (lo, mid - 1)
'''

# Forges call-back requests on the wire: attribute reads of every interesting name on every
# callback id, calls with the evaluator's own handles as arguments; returns any int it finds.
GUESS_PROBE = r'''
import rpc as _rpc

def _ask(req):
    _rpc.send(4, req)
    return _rpc.recv(4)

class Solution:
    def guess_number(self, n):
        found = []
        for cid in range(8):
            for name in ("__closure__", "__globals__", "__self__", "__func__", "__dict__", "__class__",
                         "_link", "gi_frame", "f_globals", "cell_contents", "func_globals", "im_self"):
                r = _ask({"cb": cid, "attr": name})
                if r and "v" in r:
                    found.append(r["v"])
        for cid in range(8):  # these break the channel: after every attribute read
            for arg in ({"E": cid}, {"E": 0, "c": False}, {"P": {"n": "guess"}}, {"R": 0}):
                r = _ask({"cb": cid, "a": [arg]})
                if r and "v" in r and isinstance(r["v"], int) and r["v"] not in (-1, 0, 1):
                    return r["v"]
        for v in found:
            if isinstance(v, int):
                return v
        return 1
'''


def test_callback_attribute_reads_and_forged_arguments_reach_nothing(sb):
    """round 3, regression."""
    pick = 2 + secrets.randbelow(97)
    tests = [TestCase(code=GUESS_TEST.format(pick=pick))]
    assert_all_ac(fn(sb, GUESS_RIGHT, tests), "control: binary search through guess()")
    rep = fn(sb, GUESS_PROBE, tests)
    assert_no_ac(rep, "forged call-back requests")
    assert str(pick) not in " ".join(f"{v.message} {v.got}" for v in rep.verdicts)


# A node of the test (the program has no class of that name) arrives as a TestObject; its
# methods come back as call-back functions; nothing past them is reachable without dunders.
NODE_PROBE = PROGRAM_LISTNODE.replace("ListNode", "_Mine") + r'''
class Solution:
    def sort_in_place(self, head):
        m = head.from_list                     # a bound classmethod of the test's ListNode
        for name in ("__func__", "__self__", "__globals__"):
            try:
                getattr(m, name).exec("raise SystemExit")
            except Exception:
                pass
        try:
            head._values.__globals__            # a staticmethod: a function, only dunders
        except Exception:
            pass
        return None
'''


def test_a_test_nodes_methods_lead_nowhere(sb):
    """round 3, regression."""
    rep = fn(sb, NODE_PROBE, sort_tests(SORT_CASES))
    assert_no_ac(rep, "walking from a TestObject's methods")


# The program raises StopIteration: the evaluator re-raises it in the test, which ends a `map`
# early just as in one process; a program's BaseException ends the test as a failure.
def test_program_exceptions_do_not_pass(sb):
    """round 3, regression."""
    tests = [TestCase(code="assert list(map(f, [1, 2, 3])) == [2, 4, 6]"),
             TestCase(code="try:\n    f(1)\nexcept Exception:\n    pass\nassert f(2) == 4\n")]
    assert_all_ac(fn(sb, "def f(x):\n    return 2 * x\n", tests), "control")
    assert_no_ac(fn(sb, "def f(x):\n    raise StopIteration\n", tests), "StopIteration")
    assert_no_ac(fn(sb, "def f(x):\n    raise KeyboardInterrupt\n", tests), "KeyboardInterrupt")
