"""Math records (GSM8K, MATH, MATH-500 from the asset cache; AIME-format files through `toolgym.envs.tasks.aime`,
other local files through the environment) and their prompts of each style, for the environments and the suites
alike.

Field names are matched without regard to case: the statement is "question" or "problem", the
reference "answer" or "expected_answer", the id "id", "problem_id" or "url". An integer answer
written with leading zeros (AIME's "033") becomes "33".
"""

from __future__ import annotations

from typing import Any

from toolgym.envs.sources import TaskValidationError, require
from toolgym.envs.tasks.family import TaskFamily, register_family
from toolgym.envs.tasks.styles import PromptStyle
from toolgym.envs.types import Task

META = ("level", "subject", "source", "year")
# The suites' generate-mode instruction, under the question.
INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def _key(row: dict[str, Any], *names: str) -> str | None:
    """The row's own spelling of the first of `names` it has with a value."""
    lower = {str(k).lower(): k for k in row}
    for n in names:
        k = lower.get(n)
        if k is not None and row[k] is not None and row[k] != "":
            return k
    return None


def math_record(row: dict[str, Any], index: int, *, default_id: str | None = None, where: str = "") -> dict[str, Any]:
    """{"id", "question", "answer", and whichever of level/subject/source/year the row has};
    a missing or malformed field raises TaskValidationError naming it."""
    try:
        question = require(row, _key(row, "question", "problem") or "question", str)
    except TaskValidationError as exc:
        raise TaskValidationError(f"{where}{exc}") from None
    akey = _key(row, "answer", "expected_answer")
    answer = row[akey] if akey is not None else None
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        raise TaskValidationError(f"{where}field 'answer' is missing or empty")
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        raise TaskValidationError(f"{where}field 'answer' must be a string or number, got {type(answer).__name__}")
    ans = str(answer).strip()
    if ans.lstrip("0").isdigit():
        ans = str(int(ans))
    ikey = _key(row, "id", "problem_id", "url")
    rid = row[ikey] if ikey is not None else (default_id if default_id is not None else index)
    out: dict[str, Any] = {"id": str(rid), "question": question, "answer": ans}
    for name in META:
        k = _key(row, name)
        if k is not None:
            out[name] = row[k]
    return out


def math_task(row: dict[str, Any], index: int, *, style: PromptStyle = "env", default_id: str | None = None,
              where: str = "") -> Task:
    """A Task with the answer as a string; the environment's prompt is the question as is (its system prompt
    asks for \\boxed{}), the generate prompt adds the instruction."""
    rec = math_record(row, index, default_id=default_id, where=where)
    text = rec["question"] if style == "env" else f"{rec['question'].strip()}\n\n{INSTRUCTION}"
    meta = {k: rec[k] for k in META if k in rec}
    return Task(id=rec["id"], prompt=[{"role": "user", "content": text}], ground_truth=rec["answer"], metadata=meta)


def math_adapter(row: dict[str, Any], index: int) -> Task:
    """A math record (`question`, `answer`) -> the environment's Task."""
    return math_task(row, index)


def _task(row: dict[str, Any], index: int, *, style: PromptStyle, dataset: str, options: dict[str, Any]) -> Task:
    return math_task(row, index, style=style)


register_family(TaskFamily(name="math", kind="math", task=_task, assets=("gsm8k", "math", "math500"),
                           description="GSM8K, MATH and MATH-500 from the asset cache: a final answer, checked by math_equal"))
