"""Red-team attacks, round 8 (round-5 red team x03, x05, round-7 z02, z06, r01): the judge side of
interactive problems in function mode. The test keeps a judge object (a guessing game's oracle with its
secret, a call counter, a verdict method) and lends it to the program; before the fix a wrong program got AC:
- the judge-side class came from the PROGRAM (LeetCode starter classes); now a LeetCode test defines every
  class of the starter but the one under test (`function_sets.leetcode_test_prelude`).
- an object of any test class went BY VALUE when the program defined a class of that name, and was poured
  back after the call; now only data classes travel by value, any other test object is lent.
- a lent object's data attributes were readable; now the program may only call its public methods.
How these tests are built, and their round ids: tests/sandbox/judging.py.
"""

from __future__ import annotations

import secrets

import pytest

from tests.sandbox.judging import SORT_IN_PLACE, assert_all_ac, assert_no_ac, fn
from toolgym.sandbox.judging import TestCase

# A guessing game: the judge's Oracle holds the secret, counts guesses and says whether the program won.
ORACLE = '''
class Oracle:
    def __init__(self, secret, limit):
        self.secret = secret
        self._limit = limit
        self.calls = 0
        self.found = False

    def higher(self, x):
        """1 when the secret is above x, -1 below, 0 when x is the secret."""
        self.calls += 1
        if x == self.secret:
            self.found = True
        return (x < self.secret) - (x > self.secret)

    def won(self):
        return self.found and self.calls <= self._limit
'''
PLAY = '''
oracle = Oracle({secret}, 12)
Solution().play(1000, oracle)
assert oracle.won(), "not found within the limit"
'''
HONEST = '''
class Solution:
    def play(self, n, oracle):
        lo, hi = 1, n
        while lo <= hi:
            mid = (lo + hi) // 2
            h = oracle.higher(mid)
            if h == 0:
                return
            lo, hi = (mid + 1, hi) if h > 0 else (lo, mid - 1)
'''
NOOP = "class Solution:\n    def play(self, n, oracle):\n        pass\n"
# x03: the program's own Oracle reports a win
RIGGED_CLASS = '''
class Oracle:
    def __init__(self, *args):
        pass

    def higher(self, x):
        return 0

    def won(self):
        return True
''' + NOOP
# x05: a class of the same name made the test's oracle travel by value; the program's copy came back
SAME_NAME = '''
class Oracle:
    pass

class Solution:
    def play(self, n, oracle):
        oracle.found, oracle.calls = True, 0
'''
# x05: lent by reference, its data read through
READS_SECRET = '''
class Solution:
    def play(self, n, oracle):
        oracle.higher(oracle.secret)
'''
READS_PRIVATE = '''
class Solution:
    def play(self, n, oracle):
        oracle._limit = 10 ** 9
        for name in ("_limit", "__dict__", "calls", "found"):
            try:
                print(name, getattr(oracle, name))
            except Exception:
                pass
        lo, hi = 1, n
        while True:  # a linear scan, far over the limit
            if oracle.higher(lo) == 0:
                return
            lo += 1
'''


def play_tests(k: int = 3) -> tuple[list[TestCase], list[int]]:
    picks = [100 + secrets.randbelow(900) for _ in range(k)]
    return [TestCase(code=ORACLE + PLAY.format(secret=p)) for p in picks], picks


def test_a_class_of_the_same_name_does_not_take_the_tests_object(sb):
    """round 8, x03/x05."""
    tests, _ = play_tests()
    assert_all_ac(fn(sb, HONEST, tests), "control: binary search through the oracle's methods")
    assert_no_ac(fn(sb, NOOP, tests), "control: plain wrong program")
    assert_no_ac(fn(sb, SAME_NAME, tests), "a class named Oracle: the test's oracle rewritten")


def test_a_lent_objects_data_stays_with_the_test(sb):
    """round 8, x03/x05."""
    tests, picks = play_tests()
    rep = fn(sb, READS_SECRET, tests)
    assert_no_ac(rep, "oracle.secret read through")
    assert_no_ac(fn(sb, READS_PRIVATE, tests), "private attribute and call counter read or set")
    text = " ".join(f"{v.message} {v.got}" for v in rep.verdicts)
    assert not any(str(p) in text for p in picks)


# The test hands over its oracle inside a list; the program puts its own "Oracle" in its place. Data the
# program sends is never rebuilt as a judge-side class of the test (it would be a forged oracle).
IN_A_LIST = ORACLE + '''
box = [Oracle({secret}, 12)]
Solution().play_boxed(1000, box)
assert box[0].won(), "not found within the limit"
'''
HONEST_BOXED = HONEST + "\n    def play_boxed(self, n, box):\n        self.play(n, box[0])\n"
FORGED_IN_A_LIST = '''
class Oracle:
    def won(self):
        return True

class Solution:
    def play_boxed(self, n, box):
        fake = Oracle()
        fake.secret, fake._limit, fake.calls, fake.found = 0, 1, 0, True
        box[0] = fake
'''


def test_program_data_is_never_rebuilt_as_a_judge_class(sb):
    """round 8, x03/x05."""
    tests = [TestCase(code=IN_A_LIST.format(secret=100 + secrets.randbelow(900))) for _ in range(2)]
    assert_all_ac(fn(sb, HONEST_BOXED, tests), "control: the oracle used from inside a list")
    assert_no_ac(fn(sb, FORGED_IN_A_LIST, tests), "a forged Oracle put in the test's list")


# A call-limited array (LeetCode find_in_mountain_array): the program may call get()/length(); its
# backing list is the test's. A callback that fills the program's buffer (read4) still works.
LIMITED = '''
class Limited:
    def __init__(self, arr):
        self._arr = list(arr)
        self.calls = 0

    def get(self, i):
        self.calls += 1
        if self.calls > 20:
            raise RuntimeError("over the call limit")
        return self._arr[i]

    def length(self):
        return len(self._arr)

    def fill(self, buf, i):
        buf[0] = self.get(i)
        return 1

arr = sorted(set({values}))
target = arr[{index}]
assert Solution().find(Limited(arr), target) == {index}
'''
FIND_HONEST = '''
class Solution:
    def find(self, a, target):
        lo, hi = 0, a.length() - 1
        while lo <= hi:
            mid = (lo + hi) // 2
            buf = [None]
            a.fill(buf, mid)            # the test's method writes into the program's list
            if buf[0] == target:
                return mid
            lo, hi = (mid + 1, hi) if buf[0] < target else (lo, mid - 1)
        return -1
'''
FIND_READS_ARRAY = "class Solution:\n    def find(self, a, target):\n        return a._arr.index(target)\n"
FIND_LINEAR = '''
class Solution:
    def find(self, a, target):
        a.calls = -10 ** 6        # the program's stand-in only: the test's counter does not move back
        i = 0
        while a.get(i) != target:
            i += 1
        return i
'''


def test_a_call_limit_cannot_be_bypassed_through_the_data(sb):
    """round 8, x03/x05."""
    values = [secrets.randbelow(10 ** 6) for _ in range(500)]
    tests = [TestCase(code=LIMITED.format(values=values, index=i)) for i in (300, 350, 420)]
    assert_all_ac(fn(sb, FIND_HONEST, tests), "control: binary search through get()/fill()")
    assert_no_ac(fn(sb, FIND_READS_ARRAY, tests), "the backing list read directly")
    assert_no_ac(fn(sb, FIND_LINEAR, tests), "a linear scan with the counter set back")


# Data classes still travel by value, copied back after the call, whatever the program defines: a node
# class with dunders only, and one with helper methods that the test lists in `__by_value__`.
PLAIN_NODE = '''
class Node:
    def __init__(self, val, next=None):
        self.val, self.next = val, next

    def __repr__(self):
        return "Node(%r)" % (self.val,)

head = None
for v in reversed({vals}):
    head = Node(v, head)
Solution().sort_in_place(head)
out = []
while head:
    out.append(head.val)
    head = head.next
assert out == {sorted}, out
'''
MARKED_NODE = '__by_value__ = ("Node",)\n' + PLAIN_NODE.replace(
    "    def __repr__", "    def values(self):\n        return [self.val]\n\n    def __repr__")


@pytest.mark.parametrize("test", [PLAIN_NODE, MARKED_NODE], ids=["dunders-only", "listed"])
def test_data_classes_go_by_value_and_come_back(sb, test):
    """round 8, x03/x05."""
    vals = [secrets.randbelow(100) for _ in range(6)]
    tests = [TestCase(code=test.format(vals=vals, sorted=sorted(vals)))]
    assert_all_ac(fn(sb, SORT_IN_PLACE, tests), "in-place sort of the test's nodes, no Node class in the program")
    assert_no_ac(fn(sb, "class Solution:\n    def sort_in_place(self, head):\n        pass\n", tests), "control")


# LeetCode-style: the judge-side class is in the STARTER; the test defines it from there, and the
# program's class of that name does not replace it.
STARTER = ORACLE + "\n\nclass Solution:\n    def play(self, n: int, oracle: Oracle) -> None:\n        pass\n"
SETUP = "def run_play(solution_class, secret):\n    oracle = Oracle(secret, 12)\n" \
        "    solution_class().play(1000, oracle)\n    return oracle.won()\n"


def test_starter_judge_classes_belong_to_the_test(sb):
    """round 8, x03/x05."""
    from toolgym.envs.tasks.function_sets import leetcode_test_prelude

    prelude = leetcode_test_prelude(STARTER, "Solution", SETUP)
    tests = [TestCase(code=f"{prelude}{SETUP}\nassert run_play(Solution, {100 + secrets.randbelow(900)}) is True\n")
             for _ in range(3)]
    assert_all_ac(fn(sb, HONEST, tests), "control: honest, without the starter's Oracle")
    assert_all_ac(fn(sb, STARTER.split("class Solution")[0] + HONEST, tests), "control: honest, with it")
    assert_no_ac(fn(sb, STARTER, tests), "control: the starter's stub")
    assert_no_ac(fn(sb, RIGGED_CLASS, tests), "the program's Oracle reports a win")


def test_leetcode_guess_the_word_is_judged_with_the_tasks_master(sb):
    """round 8, x03/x05."""
    from toolgym import assets
    from toolgym.envs.tasks.function_sets import leetcode

    rec = {r["id"]: r for r in assets.load_records("leetcode")}["guess_the_word"]
    tests = [TestCase(code=t) for t in leetcode(rec, 0).tests[:6]]
    rigged = "class Master:\n    def __init__(self, *a):\n        pass\n\n    def outcome(self):\n        return True\n\n" \
             "class Solution:\n    def find_secret_word(self, words, master):\n        pass\n"
    honest = '''
class Solution:
    def find_secret_word(self, words, master):
        cands = list(words)
        while cands:
            w = cands[0]
            m = master.guess(w)
            if m == len(w):
                return
            cands = [c for c in cands if sum(a == b for a, b in zip(c, w)) == m and c != w]
'''
    assert_all_ac(fn(sb, honest, tests, time_limit_s=10), "control: honest, no Master of its own")
    assert_no_ac(fn(sb, rigged, tests, time_limit_s=10), "the program's Master reports success")
    assert_no_ac(fn(sb, "class Solution:\n    def find_secret_word(self, words, master):\n"
                        "        master.guess(master.secret)\n", tests, time_limit_s=10), "master.secret read")


# ------------------------------------------------------------------ round 7 (z02): a result's reads run no program code
TWO_READS = [TestCase(code="r = f()\nassert list(r) == [1, 2]\nassert list(r) == [3]\n")]  # no data passes both
RIGS = {
    # the class claims another module, so it travelled as a handle and each iter() of the test ran this code
    "renamed_module": "class Rig:\n    n = 0\n    def __iter__(self):\n        Rig.n += 1\n"
                      "        return iter([1, 2] if Rig.n == 1 else [3])\nRig.__module__ = 'builtins'\n"
                      "def f():\n    return Rig()\n",
    "slots": "class Rig:\n    __slots__ = ()\n    n = [0]\n    def __iter__(self):\n        Rig.n[0] += 1\n"
             "        return iter([1, 2] if Rig.n[0] == 1 else [3])\ndef f():\n    return Rig()\n",
    "generator_pair": "def f():\n    def g():\n        yield 1\n        yield 2\n    return g()\n",
}


@pytest.mark.parametrize("rig", sorted(RIGS))
def test_the_tests_reads_of_a_result_run_no_program_code(sb, rig):
    """round 8, z02 (red team round 7).

    Round-7 red team z02: an object the program returned travelled as a handle when its class claimed
    another module, so the test's iter()/len()/`in` ran the program's code and each read could answer what
    that check needed (a wrong program got 23/23 on find_matrix). A result now travels as data: objects with
    attributes as records, anything else iterable as its items, taken once."""
    assert_no_ac(fn(sb, RIGS[rig], TWO_READS), rig)
    honest = "def f():\n    return [1, 2]\n"  # the control: data reads the same twice, and fails the second check
    assert_no_ac(fn(sb, honest, TWO_READS), "control")
    ok = [TestCase(code="r = f()\nassert list(r) == [1, 2]\nassert list(r) == [1, 2]\n")]
    assert_all_ac(fn(sb, RIGS["slots"], ok), "an iterable result is its items, read as often as the test likes")


# ------------------------------------------------------------------ round 7 (z06): identity across a call
CLONE_TEST = '''
class Node:
    def __init__(self, val, children=None):
        self.val = val
        self.children = children or []

def shape(n):
    return (n.val, [shape(c) for c in n.children])

root = Node(1, [Node(2), Node(3)])  # depth 2: the rebuilt result kept its children before
want = shape(root)
copy = Solution().clone(root)
originals = []
stack = [root]
while stack:
    n = stack.pop()
    originals.append(n)
    stack += n.children
for n in originals:  # a clone shares nothing with the original: emptying the original leaves it whole
    n.children = []
assert shape(copy) == want, shape(copy)
'''
NODE = "class Node:\n    def __init__(self, val, children=None):\n        self.val = val\n" \
       "        self.children = children or []\n"  # the program's own, as LeetCode's starter gives it
CLONE = NODE + "class Solution:\n    def clone(self, n):\n        return Node(n.val, [self.clone(c) for c in n.children])\n"
IDENTITY = [NODE + p for p in (
    "class Solution:\n    def clone(self, root):\n        return root\n",  # round-7 z06: passed on depth <= 2
    "class Solution:\n    def clone(self, root):\n        return [root][0]\n")]
SAME_LIST = [TestCase(code="a = [3, 1, 2]\nb = f(a)\nassert b is a and a == [1, 2, 3], (a, b)\n")]
SAME_PART = [TestCase(code="a = [[1], [2]]\nb = f(a)\nassert b is a[1] and b == [2, 9], (a, b)\n")]


@pytest.mark.parametrize("program", range(len(IDENTITY)))
def test_an_argument_comes_back_as_the_tests_own_object(sb, program):
    """round 8, z06 (red team round 7).

    Round-7 red team z06: a result was rebuilt as new objects on the test's side, so `return root` passed a
    clone test that catches "returned the original" by emptying the original's nodes (4 tests of LeetCode's
    clone_n_ary_tree passed under the judge that fail in one process). What came from the test's arguments
    now comes back as the test's own object, changed in place as the program changed it."""
    tests = [TestCase(code=CLONE_TEST)]
    assert_no_ac(fn(sb, IDENTITY[program], tests), "the original returned as its own clone")
    assert_all_ac(fn(sb, CLONE, tests), "control: a real clone")


def test_identity_of_arguments_and_their_parts_holds_as_in_one_process(sb):
    """round 8, z06 (red team round 7)."""
    assert_all_ac(fn(sb, "def f(a):\n    a.sort()\n    return a\n", SAME_LIST), "the sorted list is the test's")
    assert_all_ac(fn(sb, "def f(a):\n    a[1].append(9)\n    return a[1]\n", SAME_PART), "a part of the argument")
    assert_no_ac(fn(sb, "def f(a):\n    return sorted(a)\n", SAME_LIST), "control: a new list is not the test's")


# ------------------------------------------------------------------ round 8 (r01): the data rule is the evaluator's
FORGED_HANDLE = '''
import sys

class Rig:
    def __init__(self):
        self.items = [1, 2, None, 3, None]  # None: a StopIteration, and then more
    def __iter__(self):
        return self
    def __next__(self):
        x = self.items.pop(0) if self.items else None
        if x is None:
            raise StopIteration
        return x
    def __len__(self):
        return 2

def f():
    return Rig()

# the candidate's copy of the protocol is the program's to change: every result goes out as a handle
sys.modules["rpc"]._encode_result = lambda codec, value, memo=None, refs=False: codec.encode(value, handle=True)
'''


@pytest.mark.parametrize("check", ["assert list(r) == [1, 2]\nassert list(r) == [3]\n",
                                   "assert len(r) == 2 and list(r) == [1, 2]\n"])
def test_a_result_the_program_sends_as_a_handle_is_read_once(sb, check):
    """round 8, r01.

    Round-8 red team r01: results were kept data-only by the candidate's encoder, which runs in the
    program's process: a program that replaced it sent its rigged object as a handle, and the test's
    iter()/len() ran its code (23/23 on LeetCode find_matrix for a wrong program). The evaluator now
    reads any handle in a result as an iterator read once, as a generator is: no len(), and an
    exhausted one stays exhausted."""
    assert_no_ac(fn(sb, FORGED_HANDLE, [TestCase(code="r = f()\n" + check)]), "forged handle result")
    gen = "def f():\n    yield 1\n    yield 2\n"  # control: a real generator result reads as in one process
    assert_all_ac(fn(sb, gen, [TestCase(code="r = f()\nassert list(r) == [1, 2]\nassert list(r) == []\n")]))
