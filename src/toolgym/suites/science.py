"""Science QA tasks: ARC-Challenge, ARC-Easy, MMLU STEM subjects, SciQ, OpenBookQA, GPQA-Diamond.

Contexts follow lm-evaluation-harness per dataset, so log-likelihood numbers are comparable with
its tables: ARC and SciQ "Question: q\\nAnswer:" + " choice"; OpenBookQA the bare question stem
+ " choice"; MMLU the question with lettered options + " A".." D"; GPQA its zero-shot format with
"(A)".."(D)" options. Generate mode asks for "The answer is (X)" and grades with choice_equal.
"""

from __future__ import annotations

import string
from collections.abc import Iterable
from typing import Any

from toolgym.suites.loglik import MCItem, arc_context
from toolgym.suites.tasks import EvalTask

# The harness's MMLU "stem" category.
MMLU_STEM = (
    "abstract_algebra", "anatomy", "astronomy", "college_biology", "college_chemistry",
    "college_computer_science", "college_mathematics", "college_physics", "computer_security",
    "conceptual_physics", "electrical_engineering", "elementary_mathematics", "high_school_biology",
    "high_school_chemistry", "high_school_computer_science", "high_school_mathematics",
    "high_school_physics", "high_school_statistics", "machine_learning",
)


def _letters(n: int) -> list[str]:
    return list(string.ascii_uppercase[:n])


def generate_prompt(question: str, choices: list[str], labels: list[str]) -> str:
    """User message for generation modes."""
    opts = "\n".join(f"({lab}) {ch}" for lab, ch in zip(labels, choices, strict=True))
    return (
        "Answer the following multiple-choice question. Think briefly, then finish with a line of the "
        f"form 'The answer is (X)'.\n\nQuestion: {question}\n{opts}"
    )


def mc_task(dataset: str, rec: dict[str, Any]) -> EvalTask:
    """An EvalTask from a multiple-choice record {"id","question","choices","labels","answer",...}."""
    choices = [str(c) for c in rec["choices"]]
    labels = [str(x) for x in (rec.get("labels") or _letters(len(choices)))]
    ans = rec["answer"]
    gold = labels.index(str(ans)) if str(ans) in labels else int(ans)
    q = str(rec["question"]).strip()
    if dataset == "openbookqa":
        context, conts = q, choices
    elif dataset == "mmlu":
        opts = "\n".join(f"{lab}. {ch}" for lab, ch in zip(labels, choices, strict=True))
        context, conts = f"{q}\n{opts}\nAnswer:", labels
    elif dataset == "gpqa_diamond":
        opts = "\n".join(f"({lab}) {ch}" for lab, ch in zip(labels, choices, strict=True))
        context = f"What is the correct answer to this question:{q}\nChoices:\n{opts}\nAnswer:"
        conts = [f"({lab})" for lab in labels]
    elif dataset == "sciq" and rec.get("support"):
        context, conts = f"{str(rec['support']).strip()}\nQuestion: {q}\nAnswer:", choices
    else:  # arc_challenge, arc_easy, sciq without support
        context, conts = arc_context(q), choices
    meta = {"dataset": dataset}
    if rec.get("subject"):
        meta["subject"] = rec["subject"]
    return EvalTask(
        id=str(rec["id"]), kind="mc", prompt=generate_prompt(q, choices, labels), context=context,
        choices=list(conts), labels=labels, options=choices, gold=gold, metadata=meta,
    )


def mc_tasks(dataset: str, records: Iterable[dict[str, Any]], subjects: Iterable[str] | None = None) -> list[EvalTask]:
    """EvalTasks for a multiple-choice dataset, optionally keeping only some subjects (MMLU)."""
    keep = set(subjects) if subjects else None
    out = []
    for rec in records:
        if keep is not None and rec.get("subject") not in keep:
            continue
        out.append(mc_task(dataset, rec))
    return out


def to_mc_items(tasks: Iterable[EvalTask]) -> list[MCItem]:
    """Log-likelihood items of multiple-choice EvalTasks."""
    return [MCItem(t.id, t.context, list(t.choices), t.gold) for t in tasks if t.kind == "mc"]


def load_mc_items(dataset: str, split: str | None = None) -> list[MCItem]:
    """Log-likelihood items of a multiple-choice asset (e.g. "arc_challenge", test split by default)."""
    from toolgym.suites.sources import load_asset_records

    return to_mc_items(mc_tasks(dataset, load_asset_records(dataset, split)))
