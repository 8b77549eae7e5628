"""Multiple-choice records (ARC, MMLU, SciQ, OpenBookQA from the asset cache; GPQA after
`toolgym.envs.tasks.gpqa`), read once for the environments and the suites, and MMLU's STEM subjects.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any

from toolgym.envs.sources import TaskValidationError, require

# lm-evaluation-harness's MMLU "stem" category (tests/suites/test_lmeval_parity.py checks it against lm-eval).
MMLU_STEM = (
    "abstract_algebra", "anatomy", "astronomy", "college_biology", "college_chemistry",
    "college_computer_science", "college_mathematics", "college_physics", "computer_security",
    "conceptual_physics", "electrical_engineering", "elementary_mathematics", "high_school_biology",
    "high_school_chemistry", "high_school_computer_science", "high_school_mathematics",
    "high_school_physics", "high_school_statistics", "machine_learning",
)


@dataclass
class Choice:
    """One parsed question: `question` as the record has it (lm-eval's templates use it unstripped)."""

    id: str
    question: str
    choices: list[str]
    labels: list[str]
    answer: str  # the gold label

    @property
    def gold(self) -> int:
        return self.labels.index(self.answer)


def mc_record(row: dict[str, Any], index: int) -> Choice:
    """`question`, `choices`, `answer` (a label or a 0-based index), `labels` (default A, B, ...);
    a malformed record raises TaskValidationError naming the field."""
    question = require(row, "question", str)
    choices = require(row, "choices", list)
    if len(choices) < 2:
        raise TaskValidationError(f"field 'choices' needs at least 2 options, got {len(choices)}")
    labels = [str(x) for x in (row.get("labels") or string.ascii_uppercase[: len(choices)])]
    if len(labels) != len(choices):
        raise TaskValidationError(f"field 'labels' has {len(labels)} entries for {len(choices)} choices")
    answer = row.get("answer")
    if isinstance(answer, int) and not isinstance(answer, bool) and 0 <= answer < len(labels):
        answer = labels[answer]
    if not isinstance(answer, str) or answer not in labels:
        raise TaskValidationError(f"field 'answer' must be one of {labels}, got {answer!r}")
    return Choice(id=str(row.get("id", index)), question=question, choices=[str(c) for c in choices],
                  labels=labels, answer=answer)
