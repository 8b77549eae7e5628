"""GPQA from its official CSV (gpqa_diamond.csv: "Question", "Correct Answer",
"Incorrect Answer 1..3", "Record ID", "High-level domain", "Subdomain", ...).

Rows become records with `toolgym.envs.tasks.gpqa.gpqa_record`, the environments' GPQA parser: the
choices are shuffled per question by (seed, Record ID), the same order the environment shows.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from toolgym.envs.tasks.gpqa import REQUIRED, gpqa_record
from toolgym.errors import AssetError, ConfigError


def load_gpqa_records(path: str | Path, *, seed: int = 0) -> list[dict[str, Any]]:
    """Multiple-choice records {"id","question","choices","labels","answer","subject"}."""
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
