"""Generate-mode grading with the environment's own rubric: each completion is scored as the final
message of a one-turn episode of the entry's environment (what it submits: `final_answer`; how it
scores: `rubric`), so a benchmark number and a training reward are the same verdict.

A sample counts as correct when its reward is full. Code is judged in the sandbox the environment
borrows, many programs in flight at once: concurrent judge calls on one pooled sandbox are spread over
its workers and micro-batched, so a deep queue is what makes the pool fast (on 2 cores, 40 programs took
9.5 s one at a time, 7.5 s with 4 in flight and 2.4 s with 32); the pool bounds real parallelism.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from toolgym.envs.parsing import NoToolParser
from toolgym.envs.types import Task
from toolgym.envs.verifiers import extract_choice
from toolgym.errors import InfrastructureError

FULL = 1.0 - 1e-9  # a full reward, as in tools mode


@dataclass
class Grade:
    """One completion's verdict: correct, the answer key majority votes count (None for code), and the
    environment's details (a code judge's passed/total/statuses, an error)."""

    correct: bool
    answer: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


def answer_key(kind: str, task: Task, completion: str, answer: str | None) -> str | None:
    """The normalized answer majority votes count: the chosen letter (multiple choice), the stated
    answer (math), nothing for code."""
    if kind == "mc":
        m = task.metadata
        return extract_choice(answer if answer is not None else completion, labels=m.get("labels"),
                              choices=m.get("choices"))
    return answer if kind == "math" else None


async def agrade(env: Any, kind: str, task: Task, completion: str) -> Grade:
    """The environment's verdict on `completion` as the final message for `task`."""
    unwrapped = getattr(env, "unwrapped", env)
    parsed = NoToolParser().parse(completion)
    answer = unwrapped.final_answer(completion, parsed)
    messages = [*task.prompt, {"role": "assistant", "content": completion}]
    state: dict[str, Any] = {}
    try:
        result = await unwrapped.rubric.ascore(completion=completion, answer=answer, task=task, messages=messages,
                                               state=state)
    except InfrastructureError as exc:  # the sandbox failed, not the program: a recorded miss, not a crash
        return Grade(False, None, {"error": f"{type(exc).__name__}: {exc}"})
    details = dict(state.get("info", {}).get("judge") or {})
    if result.errors:
        details.setdefault("error", "; ".join(f"{k}: {v}" for k, v in result.errors.items()))
    return Grade(result.total >= FULL, answer_key(kind, task, completion, parsed.answer), details)


def grade_all(env: Any, kind: str, jobs: list[tuple[Task, str]], concurrency: int = 64) -> list[Grade]:
    """Grades of (task, completion) pairs, at most `concurrency` in flight."""

    async def main() -> list[Grade]:
        sem = asyncio.Semaphore(max(1, concurrency))

        async def one(task: Task, text: str) -> Grade:
            async with sem:
                return await agrade(env, kind, task, text)

        return list(await asyncio.gather(*(one(t, c) for t, c in jobs)))

    return asyncio.run(main())


def records(entry: str, kind: str, tasks: list[Task], outs: list[list[str]], grades: list[Grade]) -> list[dict[str, Any]]:
    """One record per task: every sample's correctness, answer key and text (code: the judge's counts)."""
    it = iter(grades)
    out = []
    for t, group in zip(tasks, outs, strict=True):
        gs = [next(it) for _ in group]
        rec: dict[str, Any] = {"entry": entry, "id": t.id, "kind": kind}
        if kind != "code":
            rec["reference"] = str(t.ground_truth)
        rec["correct"] = [g.correct for g in gs]
        rec["answers"] = [g.answer for g in gs]
        if kind == "code":
            rec["samples"] = [{"text": o, "passed": g.details.get("passed", 0), "total": g.details.get("total", 0),
                               "statuses": g.details.get("statuses", []),
                               **({"error": g.details["error"]} if g.details.get("error") else {})}
                              for o, g in zip(group, gs, strict=True)]
        else:
            rec["samples"] = [{"text": o} for o in group]
        out.append(rec)
    return out
