"""GPQA rows (the official CSV's "Question", "Correct Answer", "Incorrect Answer 1..3", "Record ID",
"High-level domain", "Subdomain"), turned into multiple-choice records for environments and suites.

The options are shuffled with a generator seeded by (seed, Record ID): the gold position is random
but reproducible, and the environment and the suites show a question's options in the same order
for the same seed (the environment's `seed`, the run's `--seed`).
"""

from __future__ import annotations

import csv
import random
import zlib
from pathlib import Path
from typing import Any

from toolgym.envs.sources import TaskValidationError, require
from toolgym.envs.tasks.family import TaskFamily, register_family
from toolgym.envs.tasks.multiple_choice import mc_task
from toolgym.envs.tasks.styles import PromptStyle
from toolgym.envs.types import Task
from toolgym.errors import AssetError, ConfigError

REQUIRED = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
LABELS = ["A", "B", "C", "D"]


def gpqa_record(row: dict[str, Any], index: int, *, seed: int = 0, where: str = "") -> dict[str, Any]:
    """{"id","question","choices","labels","answer","subject"}; an empty field raises TaskValidationError."""
    try:
        question, correct, *wrong = (require(row, name, str).strip() for name in REQUIRED)
    except TaskValidationError as exc:
        raise TaskValidationError(f"{where}{exc}") from None
    rid = str(row.get("Record ID") or row.get("id") or f"row{index}")
    choices = [correct, *wrong]
    order = list(range(len(choices)))
    random.Random(zlib.crc32(f"{seed}:{rid}".encode())).shuffle(order)
    return {"id": rid, "question": question, "choices": [choices[i] for i in order], "labels": list(LABELS),
            "answer": LABELS[order.index(0)], "subject": row.get("Subdomain") or row.get("High-level domain")}


def load_csv(path: str | Path, *, seed: int = 0) -> list[dict[str, Any]]:
    """Multiple-choice records {"id","question","choices","labels","answer","subject"} of the official CSV."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise AssetError(f"GPQA CSV not found at {p}; download gpqa_diamond.csv (official release) there")
    with p.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            raise ConfigError(f"{p}: not the official GPQA CSV format, missing column(s): {', '.join(missing)}")
        rows = list(reader)
    return [gpqa_record(row, n, seed=seed, where=f"{p}: row {n}: ") for n, row in enumerate(rows)]


def read(path: str, *, style: PromptStyle, options: dict[str, Any], seed: int) -> list[Task]:
    """The CSV's questions as multiple-choice Tasks, options shuffled by `seed`."""
    return [mc_task(r, n, style=style, dataset="gpqa_diamond") for n, r in enumerate(load_csv(path, seed=seed))]


register_family(TaskFamily(name="gpqa", kind="mc", read=read, dataset="gpqa_diamond",
                           description="GPQA's official CSV (gpqa:PATH)"))
