"""GPQA from its official CSV (gpqa_diamond.csv: "Question", "Correct Answer",
"Incorrect Answer 1..3", "Record ID", "High-level domain", "Subdomain", ...).

Choices are shuffled per question with a generator seeded by (seed, Record ID), so the gold
position is random but reproducible.
"""

from __future__ import annotations

import csv
import random
import zlib
from pathlib import Path
from typing import Any

from toolgym.errors import AssetError, ConfigError

REQUIRED = ("Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")


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
    out = []
    for n, row in enumerate(rows):
        rid = row.get("Record ID") or f"row{n}"
        correct = row["Correct Answer"].strip()
        choices = [correct] + [row[f"Incorrect Answer {i}"].strip() for i in (1, 2, 3)]
        rng = random.Random(zlib.crc32(f"{seed}:{rid}".encode()))
        order = list(range(4))
        rng.shuffle(order)
        shuffled = [choices[i] for i in order]
        labels = ["A", "B", "C", "D"]
        out.append({"id": rid, "question": row["Question"].strip(), "choices": shuffled, "labels": labels,
                    "answer": labels[order.index(0)], "subject": row.get("Subdomain") or row.get("High-level domain")})
    return out
