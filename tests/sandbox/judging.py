"""Helpers shared by the judge's red-team tests (test_attacks_v2.py, test_attacks_v3.py)."""

from __future__ import annotations

from toolgym._assets.leetcode import SUPPORT
from toolgym.sandbox.judging import judge

TL = 2.0
MEM = 256
RIGHT = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a - b\n"
# the test side's ListNode: the one toolgym's LeetCode tests define (structural __eq__), which the test
# lists as data (`__by_value__`, as toolgym's LeetCode tests do): a class with methods is otherwise lent
LISTNODE = '__by_value__ = ("ListNode",)\n' + SUPPORT["ListNode"]
# the program side's ListNode, as a LeetCode starter defines it
PROGRAM_LISTNODE = '''
class ListNode:
    def __init__(self, val=0, next=None):
        self.val = val
        self.next = next
'''


def fn(sb, program: str, tests, **kw):
    kw.setdefault("time_limit_s", TL)
    kw.setdefault("memory_mb", MEM)
    return judge(sb, program, tests, mode="function", **kw)


def statuses(report) -> list[str]:
    return [v.status for v in report.verdicts]


def assert_no_ac(report, what: str = "") -> None:
    assert report.total > 0
    assert report.passed == 0, (what, report.verdicts)


def assert_all_ac(report, what: str = "") -> None:
    assert report.all_passed, (what, report.verdicts, report.notes)
