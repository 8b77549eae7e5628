"""One pipeline for HumanEval, MBPP and LeetCode records: the environment's tasks and the suite's
(generate prompts) carry the same test code, entry point and program prefix, for every record of the
cached assets; only the prompt differs."""

from __future__ import annotations

import pytest

from toolgym.assets import load_records
from toolgym.envs.tasks import catalog
from toolgym.envs.tasks._code import code_adapter
from toolgym.envs.tasks.function_sets import leetcode_task, mbpp_task


@pytest.mark.parametrize("dataset", ["humaneval", "mbpp", "leetcode"])
def test_env_and_suite_get_the_same_tests(dataset):
    rows = load_records(dataset)
    suite = catalog.load(f"asset:{dataset}", style="generate").tasks
    for i, (row, ev) in enumerate(zip(rows, suite, strict=True)):
        task = code_adapter(row, i)
        assert (task.id, task.ground_truth) == (ev.id, ev.ground_truth), ev.id
        assert task.prompt != ev.prompt


def test_entry_points_and_prefixes():
    he = code_adapter(load_records("humaneval")[0], 0).ground_truth
    assert he["entry_point"] == "has_close_elements" and he["prefix"].startswith("from typing import List")
    lc = leetcode_task(load_records("leetcode")[0], 0, "generate").ground_truth
    assert lc["entry_point"] == "accounts_merge"  # the method, not "Solution.accounts_merge"
    mb = mbpp_task({"id": "m", "prompt": "p", "tests": ["assert f(1) == 1"], "setup_code": ""}, 0, "generate")
    assert (mb.ground_truth["entry_point"], mb.ground_truth["hidden"]) == ("f", [{"code": "assert f(1) == 1\n"}])
