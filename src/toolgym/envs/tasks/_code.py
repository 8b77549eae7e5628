"""The code environment's record adapter: it detects a record's format (HumanEval, MBPP, LeetCode,
LiveCodeBench, CodeContests, generic) and builds the environment's Task with that family's module.

The code task itself (ground truth, submitted program, judge bridge) is `toolgym.envs.tasks.code_task`;
its names are importable from here too, their old import path.
"""

from __future__ import annotations

from typing import Any

from toolgym.envs.sources import TaskValidationError, require
from toolgym.envs.tasks import codecontests, function_sets, livecodebench
from toolgym.envs.tasks.code_task import FUNCTION_HINT, STDIO_HINT, code_task
from toolgym.envs.tasks.code_task import assemble_program as assemble_program
from toolgym.envs.tasks.code_task import hidden_test_cases as hidden_test_cases
from toolgym.envs.tasks.code_task import judge_options as judge_options
from toolgym.envs.tasks.code_task import public_test_cases as public_test_cases
from toolgym.envs.tasks.code_task import run_judge as run_judge
from toolgym.envs.tasks.function_sets import humaneval_test_code as humaneval_test_code
from toolgym.envs.types import Task


def _generic(row: dict[str, Any], i: int) -> Task:
    text = require(row, "prompt")
    mode = row.get("mode", "stdio")
    if mode not in ("stdio", "function"):
        raise TaskValidationError(f"field 'mode' must be 'stdio' or 'function', got {mode!r}")
    tests = require(row, "tests", list)
    public = row.get("public_tests") or []
    return code_task(str(row.get("id", i)), f"{text}\n\n{STDIO_HINT if mode == 'stdio' else FUNCTION_HINT}", mode,
                     public, tests, "custom", row.get("entry_point"))


def code_adapter(row: dict[str, Any], index: int) -> Task:
    """Detect the record's format (HumanEval, MBPP, LeetCode, LiveCodeBench, CodeContests, generic)."""
    if "canonical_solution" in row and "test" in row:
        return function_sets.humaneval_task(row, index)
    if "test_setup" in row:
        return function_sets.leetcode_task(row, index)
    if "question_content" in row:
        return livecodebench.lcb_task(row, index)
    if "description" in row and "public_tests" in row:
        return codecontests.cc_task(row, index)
    if "tests" in row and isinstance(row.get("tests"), list) and row["tests"] and isinstance(row["tests"][0], str):
        return function_sets.mbpp_task(row, index)
    return _generic(row, index)
