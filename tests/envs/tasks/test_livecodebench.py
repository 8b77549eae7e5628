"""One LiveCodeBench pipeline: the environment and the suite get the same tests from the same record,
and the environment's rubric judges functional problems in call form, in every mode."""

from __future__ import annotations

import base64
import json
import zlib

import pytest

from tests.requirements import need
from toolgym.envs.sources import TaskValidationError
from toolgym.envs.tasks._code import code_adapter
from toolgym.envs.tasks.livecodebench import lcb_task, parse_record


def _functional_row() -> dict:
    public = [{"input": "[1, 2]\n3", "output": "[1, 2, 3]", "testtype": "functional"}]
    private = [{"input": "[]\n5", "output": "[5]", "testtype": "functional"}]
    return {"question_id": "f1", "question_title": "Append", "question_content": "Return nums with k appended.",
            "platform": "leetcode", "contest_date": "2024-01-02T00:00:00", "difficulty": "easy",
            "starter_code": "class Solution:\n    def app(self, nums: List[int], k: int) -> List[int]:\n        ",
            "public_test_cases": json.dumps(public),
            "private_test_cases": base64.b64encode(zlib.compress(json.dumps(private).encode())).decode(),
            "metadata": json.dumps({"func_name": "app"})}


def _stdin_row() -> dict:
    return {"question_id": "s1", "question_content": "Print a+b.",
            "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]),
            "private_test_cases": json.dumps([{"input": "4 4\n", "output": "8\n", "testtype": "stdin"}])}


def _suite_tests(row: dict) -> list[dict]:
    return lcb_task(row, style="generate").ground_truth["hidden"]


@pytest.mark.parametrize("row", [_functional_row(), _stdin_row()], ids=["functional", "stdin"])
def test_env_and_suite_get_the_same_tests(row):
    task = code_adapter(row, 0)
    assert task.ground_truth["hidden"] == _suite_tests(row)
    assert task.ground_truth == lcb_task(row, style="generate").ground_truth
    assert task.prompt != lcb_task(row, style="generate").prompt


def test_functional_tests_are_in_call_form():
    assert _suite_tests(_functional_row()) == [
        {"call": "Solution().app", "args": [[1, 2], 3], "expected": [1, 2, 3]},
        {"call": "Solution().app", "args": [[], 5], "expected": [5]}]
    assert code_adapter(_functional_row(), 0).ground_truth["prefix"].startswith("from typing import *")


def test_malformed_records_say_what_is_wrong():
    mixed = dict(_functional_row(), private_test_cases=json.dumps([{"input": "1", "output": "1", "testtype": "stdin"}]))
    with pytest.raises(TaskValidationError, match="mixes stdin and functional"):
        parse_record(mixed)
    odd = dict(_stdin_row(), public_test_cases=json.dumps([{"input": "1", "output": "1", "testtype": "weird"}]))
    with pytest.raises(TaskValidationError, match="LiveCodeBench s1: field 'public_test_cases' test 0: unknown testtype"):
        lcb_task(odd, where="LiveCodeBench s1: ")


@pytest.fixture(scope="module")
def sandbox():
    from toolgym.sandbox import Limits, open_sandbox

    try:
        sb = open_sandbox("local", Limits(timeout_s=10, memory_mb=512), pool_size=1)
    except Exception as exc:  # bubblewrap missing
        need(False, f"the local sandbox is unavailable: {exc}")
    yield sb
    sb.close()


def test_generate_mode_judges_in_call_form(sandbox):
    import toolgym
    from toolgym.suites.grading import grade_all

    task = lcb_task(_functional_row(), style="generate")
    head = "```python\nclass Solution:\n    def app(self, nums: List[int], k: int) -> List[int]:\n"
    right = head + "        return nums + [k]\n```"
    as_tuple = head + "        return tuple(nums) + (k,)\n```"  # JSON-equal to the list
    wrong = head + "        return nums\n```"
    # the assert form put the expected value in the program's namespace, where this read it
    peeking = head + "        return globals().get('_expected')\n```"
    env = toolgym.make("toolgym/CodeContest-v0", dataset=[task], sandbox=sandbox, reward_mode="all")
    grades = grade_all(env, "code", [(task, c) for c in (right, as_tuple, wrong, peeking)])
    env.close()
    assert [(g.details["passed"], g.details["total"]) for g in grades] == [(2, 2), (2, 2), (0, 2), (0, 2)]
    assert [g.correct for g in grades] == [True, True, False, False]
