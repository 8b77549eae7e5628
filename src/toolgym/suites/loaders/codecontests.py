"""CodeContests-format local files (DeepMind's code_contests rows, as JSONL / JSON / Parquet).

Records are parsed by `toolgym.envs.tasks.codecontests` (the environments' parser too); the
suites judge with the record's own time limit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolgym.envs.tasks._files import data_files, iter_records
from toolgym.envs.tasks.codecontests import TEST_GROUPS, parse_record
from toolgym.suites.eval_task import CodeTest, EvalTask

__all__ = ["TEST_GROUPS", "codecontests_task", "load_codecontests"]
DEFAULT_TIME_LIMIT_S = 10.0  # per test, for records that state none


def codecontests_task(row: dict[str, Any], groups: tuple[str, ...] = TEST_GROUPS) -> EvalTask:
    """An EvalTask from one record, parsed as the environments parse it; `groups` picks the tests."""
    p = parse_record(row, where=f"CodeContests {row.get('name') or row.get('id')}: ")
    tests = [CodeTest(input=t["input"], output=t["output"]) for t in p.group_tests(groups)]
    prompt = (p.text.strip() + "\n\nRead the input from stdin and write the answer to stdout. "
              "Reply with a Python 3 program in one ```python block.")
    return EvalTask(id=p.id, kind="code", prompt=prompt, tests=tests, test_mode="stdio",
                    time_limit_s=p.time_limit_s or DEFAULT_TIME_LIMIT_S, metadata={"dataset": "codecontests", **p.info})


def load_codecontests(path: str | Path, groups: tuple[str, ...] = TEST_GROUPS) -> list[EvalTask]:
    """Tasks from a CodeContests file or folder; `groups` picks which test groups to judge with."""
    return [codecontests_task(r, groups) for f in data_files(path) for r in iter_records(f)]
