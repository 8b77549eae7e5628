"""The code environment's record adapter: the code task family that recognizes a record's format (HumanEval,
MBPP, LeetCode, LiveCodeBench, CodeContests, a plug-in's) builds its Task; a record none recognizes is read in
the generic format (`prompt`, `tests`, `mode`, `public_tests`, `entry_point`).

The code task itself (ground truth, submitted program, judge bridge) is `toolgym.envs.tasks.code_task`.
"""

from __future__ import annotations

from typing import Any

from toolgym.envs.sources import TaskValidationError, require
from toolgym.envs.tasks.code_task import FUNCTION_HINT, STDIO_HINT, code_task
from toolgym.envs.tasks.family import families
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
    """The environment's Task of a bare code record: the first code family that recognizes its format (HumanEval,
    MBPP, LeetCode, LiveCodeBench, CodeContests, a plug-in's), else the generic format."""
    for family in families():
        dataset = family.recognizes(row) if family.kind == "code" and family.recognizes is not None else None
        if dataset is not None:
            task = family.record_task(row, index, dataset=dataset)
            if task is not None:
                return task
    return _generic(row, index)
