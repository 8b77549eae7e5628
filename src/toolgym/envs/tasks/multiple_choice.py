"""Multiple-choice records (ARC, MMLU, SciQ, OpenBookQA from the asset cache; GPQA after
`toolgym.envs.tasks.gpqa`), their prompts of each style, and MMLU's STEM subjects, for the environments
and the suites alike.

Log-likelihood contexts (style "loglik") are lm-evaluation-harness's zero-shot prompts (0.4.x task YAMLs:
`doc_to_text`, the MMLU `description`, `doc_to_choice`), applied to the raw record fields, so the (context,
continuation) pairs the suites score are the requests lm-eval builds for the same documents
(tests/suites/test_lmeval_parity.py checks this against lm-eval's own task objects):

- ARC: "Question: {question}\nAnswer:" + " {choice}"
- OpenBookQA: the question stem as is + " {choice}"
- SciQ: "{support.lstrip()}\nQuestion: {question}\nAnswer:" + " {choice}" (an empty support leaves the
  leading newline, as in lm-eval)
- MMLU: "The following are multiple choice questions (with answers) about {subject words}.\n\n"
  + "{question.strip()}\nA. ..\nD. ..\nAnswer:" + " A".." D"
- GPQA: its zero-shot format with "(A)".."(D)" options (no lm-eval counterpart claimed).

The generate prompt asks for "The answer is (X)"; the environment's asks for \\boxed{LETTER} (its system
prompt) under the question and lettered options. Both are graded by `choice_equal`.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Any

from toolgym.envs.sources import TaskValidationError, require
from toolgym.envs.tasks.family import TaskFamily, register_family
from toolgym.envs.tasks.styles import PromptStyle
from toolgym.envs.types import Task

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


def subject_filter(subjects: str | list[str] | tuple[str, ...] | None) -> frozenset[str] | None:
    """The MMLU subjects to keep: "stem" is lm-eval's STEM category, a name or a list names subjects; None keeps all."""
    if subjects is None:
        return None
    if subjects == "stem":
        return frozenset(MMLU_STEM)
    return frozenset([subjects] if isinstance(subjects, str) else subjects)


# ------------------------------------------------------------------------------------ prompts


def format_question(question: str, choices: list[str], labels: list[str]) -> str:
    """The environment's user message: the question and its lettered options."""
    return question.strip() + "\n\n" + "\n".join(f"{lab}. {str(c).strip()}" for lab, c in zip(labels, choices, strict=False))


def generate_prompt(question: str, choices: list[str], labels: list[str]) -> str:
    """The suites' generate-mode user message."""
    opts = "\n".join(f"({lab}) {ch}" for lab, ch in zip(labels, choices, strict=True))
    return (
        "Answer the following multiple-choice question. Think briefly, then finish with a line of the "
        f"form 'The answer is (X)'.\n\nQuestion: {question}\n{opts}"
    )


def arc_context(question: str) -> str:
    """lm-eval's ARC prompt (`doc_to_text` of arc_easy / arc_challenge)."""
    return f"Question: {question}\nAnswer:"


def mmlu_description(subject: str) -> str:
    """lm-eval's per-subject MMLU description, prepended to every zero-shot context."""
    return f"The following are multiple choice questions (with answers) about {' '.join(subject.split('_'))}.\n\n"


def loglik_request(dataset: str, row: dict[str, Any], c: Choice) -> dict[str, Any]:
    """{"context", "continuations"}: lm-eval's request for this record (see the module docstring)."""
    raw, q = c.question, c.question.strip()  # lm-eval's templates use the field as is (MMLU strips it)
    if dataset == "openbookqa":
        context, conts = raw, c.choices
    elif dataset == "mmlu":
        opts = "\n".join(f"{lab}. {ch}" for lab, ch in zip(c.labels, c.choices, strict=True))
        desc = mmlu_description(str(row["subject"])) if row.get("subject") else ""
        context, conts = f"{desc}{q}\n{opts}\nAnswer:", c.labels
    elif dataset == "gpqa_diamond":
        opts = "\n".join(f"({lab}) {ch}" for lab, ch in zip(c.labels, c.choices, strict=True))
        context = f"What is the correct answer to this question:{q}\nChoices:\n{opts}\nAnswer:"
        conts = [f"({lab})" for lab in c.labels]
    elif dataset == "sciq":
        context, conts = f"{str(row.get('support') or '').lstrip()}\nQuestion: {raw}\nAnswer:", c.choices
    else:  # arc_challenge, arc_easy
        context, conts = arc_context(raw), c.choices
    return {"context": context, "continuations": list(conts)}


def mc_task(row: dict[str, Any], index: int, *, style: PromptStyle = "env", dataset: str = "") -> Task:
    """A Task: the gold letter as ground truth, the options and labels in metadata (the grader reads them)."""
    c = mc_record(row, index)
    text = (format_question(c.question, c.choices, c.labels) if style == "env"
            else generate_prompt(c.question.strip(), c.choices, c.labels))
    meta: dict[str, Any] = {"choices": c.choices, "labels": c.labels}
    if row.get("subject"):
        meta["subject"] = row["subject"]
    if style == "loglik":
        meta["loglik"] = loglik_request(dataset, row, c)
    return Task(id=c.id, prompt=[{"role": "user", "content": text}], ground_truth=c.answer, metadata=meta)


def mc_adapter(row: dict[str, Any], index: int) -> Task:
    """A multiple-choice record (`question`, `choices`, `answer` letter, `labels`?) -> the environment's Task."""
    return mc_task(row, index)


def _task(row: dict[str, Any], index: int, *, style: PromptStyle, dataset: str, options: dict[str, Any]) -> Task | None:
    """MMLU keeps the subjects of options.subjects (lm-eval's STEM category for "stem"); None leaves a record out."""
    keep = subject_filter(options.get("subjects")) if dataset == "mmlu" else None
    if keep is not None and row.get("subject") not in keep:
        return None
    return mc_task(row, index, style=style, dataset=dataset)


register_family(TaskFamily(
    name="multiple_choice", kind="mc", task=_task, assets=("arc_challenge", "arc_easy", "mmlu", "sciq", "openbookqa"),
    description="ARC, MMLU, SciQ and OpenBookQA from the asset cache; lm-eval's contexts for loglik"))
