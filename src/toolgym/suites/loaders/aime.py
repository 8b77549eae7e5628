"""AIME-format JSONL: one problem per line with an id ("id"/"ID"/"problem_id"), the statement
("problem"/"Problem"/"question") and an integer answer ("answer"/"Answer"); "year" optional."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolgym.envs.tasks._files import data_files, iter_records
from toolgym.envs.tasks.math_records import math_record


def load_aime_records(path: str | Path) -> list[dict[str, Any]]:
    """Math records {"id","question","answer","year"?} from AIME-format files (read as the environments
    read math records: `toolgym.envs.tasks.math_records`)."""
    return [math_record(row, n, default_id=f"{f.stem}-{n}", where=f"{f} record {n}: ")
            for f in data_files(path) for n, row in enumerate(iter_records(f))]
