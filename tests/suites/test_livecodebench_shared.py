"""One LiveCodeBench parser: the environment and the suite get the same tests from the same record,
and generate mode judges functional problems in call form, like tools mode."""

from __future__ import annotations

import asyncio
import base64
import json
import zlib

import pytest

from tests.requirements import need
from toolgym.envs.sources import TaskValidationError
from toolgym.envs.tasks._code import code_adapter
from toolgym.envs.tasks.livecodebench import parse_record
from toolgym.suites.code import build_program, judge_many
from toolgym.suites.loaders.livecodebench import lcb_task


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
    out = []
    for t in lcb_task(row).tests:
        out.append({"call": t.call, "args": t.args, "expected": t.expected} if t.call
                   else {"input": t.input, "output": t.output})
    return out


@pytest.mark.parametrize("row", [_functional_row(), _stdin_row()], ids=["functional", "stdin"])
def test_env_and_suite_get_the_same_tests(row):
    task = code_adapter(row, 0)
    assert task.ground_truth["hidden"] == _suite_tests(row)
    assert task.ground_truth["mode"] == lcb_task(row).test_mode


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
        lcb_task(odd)


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
    task = lcb_task(_functional_row())
    head = "```python\nclass Solution:\n    def app(self, nums: List[int], k: int) -> List[int]:\n"
    right = head + "        return nums + [k]\n```"
    as_tuple = head + "        return tuple(nums) + (k,)\n```"  # JSON-equal to the list
    wrong = head + "        return nums\n```"
    # the assert form put the expected value in the program's namespace, where this read it
    peeking = head + "        return globals().get('_expected')\n```"
    jobs = [(task, build_program(task, c)) for c in (right, as_tuple, wrong, peeking)]
    res = asyncio.run(judge_many(sandbox, jobs))
    assert [(r["passed"], r["total"]) for r in res] == [(2, 2), (2, 2), (0, 2), (0, 2)]
