"""CodeContests-format local files (DeepMind's code_contests rows, as JSONL / JSON / Parquet).

Row fields used: name, description, public_tests / private_tests / generated_tests (each
{"input": [...], "output": [...]}), time_limit ({"seconds", "nanos"} or seconds), difficulty,
cf_rating. All tests are stdio.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolgym.suites.loaders._files import data_files, iter_records
from toolgym.suites.tasks import CodeTest, EvalTask

TEST_GROUPS = ("public_tests", "private_tests", "generated_tests")


def _time_limit(raw: Any, default: float = 10.0) -> float:
    if isinstance(raw, dict):
        s = float(raw.get("seconds") or 0) + float(raw.get("nanos") or 0) / 1e9
        return s if s > 0 else default
    if isinstance(raw, (int, float)) and raw > 0:
        return float(raw)
    return default


def codecontests_task(row: dict[str, Any], groups: tuple[str, ...] = TEST_GROUPS) -> EvalTask:
    tests = []
    for g in groups:
        block = row.get(g) or {}
        for i, o in zip(block.get("input") or [], block.get("output") or [], strict=False):
            tests.append(CodeTest(input=str(i), output=str(o)))
    prompt = (str(row.get("description") or "").strip()
              + "\n\nRead the input from stdin and write the answer to stdout. "
                "Reply with a Python 3 program in one ```python block.")
    return EvalTask(
        id=str(row.get("name") or row.get("id")), kind="code", prompt=prompt, tests=tests, test_mode="stdio",
        time_limit_s=_time_limit(row.get("time_limit")),
        metadata={"dataset": "codecontests", "difficulty": row.get("difficulty"), "cf_rating": row.get("cf_rating")},
    )


def load_codecontests(path: str | Path, groups: tuple[str, ...] = TEST_GROUPS) -> list[EvalTask]:
    """Tasks from a CodeContests file or folder; `groups` picks which test groups to judge with."""
    return [codecontests_task(r, groups) for f in data_files(path) for r in iter_records(f)]
