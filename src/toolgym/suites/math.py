"""Math tasks: GSM8K, MATH-500 and AIME-format files. Graded on the final answer with math_equal."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from toolgym.envs.answers import extract_answer
from toolgym.envs.tasks.math_records import math_record
from toolgym.suites.eval_task import EvalTask

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def math_task(dataset: str, rec: dict[str, Any]) -> EvalTask:
    """An EvalTask from a record {"id","question","answer",...}, read as the environments read it."""
    r = math_record(rec, 0)
    meta = {"dataset": dataset}
    for key in ("level", "subject", "type", "year"):
        if rec.get(key) is not None:
            meta[key] = rec[key]
    return EvalTask(id=r["id"], kind="math", prompt=f"{r['question'].strip()}\n\n{INSTRUCTION}", answer=r["answer"],
                    metadata=meta)


def math_tasks(dataset: str, records: Iterable[dict[str, Any]]) -> list[EvalTask]:
    return [math_task(dataset, r) for r in records]


def extract_final_answer(text: str) -> str | None:
    """The model's final answer, found as the environments find it (answer tag, last \\boxed{}, "Answer:")."""
    return extract_answer(text)


def grade_math(text: str, gold: str) -> tuple[bool, str | None]:
    """(correct, extracted answer) for one completion."""
    from toolgym.envs.verifiers import math_equal

    ans = extract_final_answer(text)
    if ans is None:
        return False, None
    return bool(math_equal(ans, gold)), ans
