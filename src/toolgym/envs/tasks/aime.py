"""AIME-format files (``aime:PATH``): JSON Lines, JSON or Parquet, one file or a folder; each record an id
("id"/"ID"/"problem_id", else FILE-N), the statement ("problem"/"Problem"/"question") and an integer answer
("answer"/"Answer"; "033" is 33), "year" optional. Prompted and graded as the math family's records."""

from __future__ import annotations

from typing import Any

from toolgym.envs.tasks._files import data_files, iter_numbered_records
from toolgym.envs.tasks.family import TaskFamily, register_family
from toolgym.envs.tasks.math_records import math_task
from toolgym.envs.tasks.styles import PromptStyle
from toolgym.envs.types import Task


def load_aime(path: str, *, style: PromptStyle = "env", options: dict[str, Any] | None = None, seed: int = 0) -> list[Task]:
    """Tasks of AIME-format files; a malformed record names its FILE:LINE."""
    return [math_task(row, n, style=style, default_id=f"{f.stem}-{n}", where=f"{where}: ")
            for f in data_files(path) for n, (where, row) in enumerate(iter_numbered_records(f))]


register_family(TaskFamily(name="aime", kind="math", read=load_aime, description="AIME-format files (aime:PATH)"))
