"""GPQA rows (the official CSV's "Question", "Correct Answer", "Incorrect Answer 1..3", "Record ID",
"High-level domain", "Subdomain"), turned into one multiple-choice record for environments and suites.

The options are shuffled with a generator seeded by (seed, Record ID): the gold position is random
but reproducible, and the environment and the suites (both at seed 0 by default) show a question's
options in the same order.
"""

from __future__ import annotations

import random
import zlib
from typing import Any

from toolgym.envs.sources import TaskValidationError, require

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
