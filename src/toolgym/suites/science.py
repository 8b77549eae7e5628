"""Science QA tasks: ARC-Challenge, ARC-Easy, MMLU STEM subjects, SciQ, OpenBookQA, GPQA-Diamond.

Log-likelihood contexts are lm-evaluation-harness's zero-shot prompts (0.4.x task YAMLs: `doc_to_text`,
the MMLU `description`, `doc_to_choice`), applied to the raw record fields, so the (context, continuation)
pairs toolgym scores are the requests lm-eval builds for the same documents (tests/suites/test_lmeval_parity.py
checks this against lm-eval's own task objects):

- ARC: "Question: {question}\nAnswer:" + " {choice}"
- OpenBookQA: the question stem as is + " {choice}"
- SciQ: "{support.lstrip()}\nQuestion: {question}\nAnswer:" + " {choice}" (an empty support leaves the
  leading newline, as in lm-eval)
- MMLU: "The following are multiple choice questions (with answers) about {subject words}.\n\n"
  + "{question.strip()}\nA. ..\nD. ..\nAnswer:" + " A".." D"
- GPQA: its zero-shot format with "(A)".."(D)" options (no lm-eval counterpart claimed).

Generate mode asks for "The answer is (X)" and grades with choice_equal.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from toolgym.envs.tasks.multiple_choice import MMLU_STEM as MMLU_STEM  # lm-eval's "stem" category
from toolgym.envs.tasks.multiple_choice import mc_record
from toolgym.suites.eval_task import EvalTask
from toolgym.suites.lmeval import lmeval_task_name, mmlu_description
from toolgym.suites.loglik import MCItem, arc_context


def generate_prompt(question: str, choices: list[str], labels: list[str]) -> str:
    """User message for generation modes."""
    opts = "\n".join(f"({lab}) {ch}" for lab, ch in zip(labels, choices, strict=True))
    return (
        "Answer the following multiple-choice question. Think briefly, then finish with a line of the "
        f"form 'The answer is (X)'.\n\nQuestion: {question}\n{opts}"
    )


def mc_task(dataset: str, rec: dict[str, Any]) -> EvalTask:
    """An EvalTask from a multiple-choice record {"id","question","choices","labels","answer",...}."""
    c = mc_record(rec, 0)  # read as the environments read it
    choices, labels, gold = c.choices, c.labels, c.gold
    raw = c.question  # lm-eval's templates use the field as is (MMLU strips it)
    q = raw.strip()
    if dataset == "openbookqa":
        context, conts = raw, choices
    elif dataset == "mmlu":
        opts = "\n".join(f"{lab}. {ch}" for lab, ch in zip(labels, choices, strict=True))
        desc = mmlu_description(str(rec["subject"])) if rec.get("subject") else ""
        context, conts = f"{desc}{q}\n{opts}\nAnswer:", labels
    elif dataset == "gpqa_diamond":
        opts = "\n".join(f"({lab}) {ch}" for lab, ch in zip(labels, choices, strict=True))
        context = f"What is the correct answer to this question:{q}\nChoices:\n{opts}\nAnswer:"
        conts = [f"({lab})" for lab in labels]
    elif dataset == "sciq":
        context, conts = f"{str(rec.get('support') or '').lstrip()}\nQuestion: {raw}\nAnswer:", choices
    else:  # arc_challenge, arc_easy
        context, conts = arc_context(raw), choices
    meta = {"dataset": dataset}
    if rec.get("subject"):
        meta["subject"] = rec["subject"]
    lm_task = lmeval_task_name(dataset, rec.get("subject"))
    if lm_task:
        meta["lmeval_task"] = lm_task
    return EvalTask(
        id=c.id, kind="mc", prompt=generate_prompt(q, choices, labels), context=context,
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
    from toolgym.suites.source_strings import load_asset_records

    return to_mc_items(mc_tasks(dataset, load_asset_records(dataset, split)))
