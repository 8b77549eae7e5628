"""One parser for HumanEval, MBPP and LeetCode records: the environment and the suite judge the same
test code, with the same entry point and program prefix, for every record of the cached assets."""

from __future__ import annotations

import pytest

from toolgym.assets import load_records
from toolgym.envs.tasks._code import code_adapter
from toolgym.suites.code import code_tasks


@pytest.mark.parametrize("dataset", ["humaneval", "mbpp", "leetcode"])
def test_env_and_suite_get_the_same_tests(dataset):
    rows = load_records(dataset)
    suite = code_tasks(dataset, rows)
    for i, (row, ev) in enumerate(zip(rows, suite, strict=True)):
        task = code_adapter(row, i)
        gt = task.ground_truth
        assert (task.id, [t["code"] for t in gt["hidden"]]) == (ev.id, [t.code for t in ev.tests]), ev.id
        assert (gt["entry_point"] or "", gt["prefix"]) == (ev.entry_point, ev.program_prefix), ev.id


def test_entry_points_and_prefixes():
    he = code_adapter(load_records("humaneval")[0], 0).ground_truth
    assert he["entry_point"] == "has_close_elements" and he["prefix"].startswith("from typing import List")
    lc = code_tasks("leetcode", load_records("leetcode")[:1])[0]
    assert lc.entry_point == "accounts_merge"  # the method, not "Solution.accounts_merge"
    mb = code_tasks("mbpp", [{"id": "m", "prompt": "p", "tests": ["assert f(1) == 1"], "setup_code": ""}])[0]
    assert (mb.entry_point, mb.tests[0].code) == ("f", "assert f(1) == 1\n")  # from the first assert
