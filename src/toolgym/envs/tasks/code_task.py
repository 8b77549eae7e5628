"""The code task, one definition for the environment's reward, its run_tests tool and the suites:
its ground truth, the program a reply submits, and the async bridge to the sandbox judge.

Tests live in `Task.ground_truth` ({"mode", "public", "hidden", "entry_point", "prefix", "judge"?}),
never in metadata, so hidden tests do not travel in `info` to the agent. "judge" holds the task's own
judge keywords (a Kattis package's validator and limits, a CodeContests record's time limit), which win
over the environment's defaults.
"""

from __future__ import annotations

import re
from typing import Any

from toolgym._text import extract_code
from toolgym.envs.sources import TaskValidationError
from toolgym.envs.types import Task

FUNCTION_HINT = "Write a Python solution in one ```python code block."
STDIO_HINT = "Write a Python program that reads from standard input and writes to standard output, in one ```python code block."


def code_task(tid: str, text: str, mode: str, public: list[dict], hidden: list[dict], source: str,
              entry_point: str | None = None, prefix: str = "", judge: dict[str, Any] | None = None) -> Task:
    """A code Task; a problem without hidden tests cannot be scored and raises TaskValidationError."""
    if not hidden:
        raise TaskValidationError("no hidden tests: the problem cannot be scored")
    truth: dict[str, Any] = {"mode": mode, "public": public, "hidden": hidden, "entry_point": entry_point,
                             "prefix": prefix}
    if judge:
        truth["judge"] = dict(judge)
    return Task(id=tid, prompt=[{"role": "user", "content": text}], ground_truth=truth,
                metadata={"source": source, "mode": mode, "num_public_tests": len(public), "num_hidden_tests": len(hidden)})


def _truth(task: Task) -> dict[str, Any]:
    return task.ground_truth if isinstance(task.ground_truth, dict) else {}


def extract_program(text: str, entry_point: str = "") -> str:
    """The program a reply submits: outside <think>, the closed block defining `entry_point` (else the last
    python block, else the last untagged one); else an unterminated fence's body (a reply cut at the token
    limit); else the whole text (a bare HumanEval-style continuation)."""
    from toolgym.envs.parsing import strip_thinking

    text = strip_thinking(text or "")
    code = extract_code(text, entry_point=entry_point)
    if code is not None:
        return code
    if "```" in text:
        tail = text.split("```", 1)[1]
        return tail.split("\n", 1)[1] if "\n" in tail else tail
    return text


def assemble_program(code: str, task: Task) -> str:
    """The program to judge: code that lacks the entry point continues the task's prefix (a HumanEval body);
    otherwise the prefix's import lines (typing, math; LeetCode's starter imports) are kept in front."""
    gt = _truth(task)
    ep, prefix = gt.get("entry_point") or "", gt.get("prefix") or ""
    if not prefix:
        return code
    if ep and re.search(rf"def\s+{re.escape(ep)}\s*\(", code) is None:
        return prefix + code
    imports = [ln for ln in prefix.splitlines() if ln.startswith(("import ", "from "))]
    return "\n".join(imports) + ("\n" if imports else "") + code


def submitted_program(text: str, task: Task) -> str:
    """What the judge runs for a reply: `extract_program`, then `assemble_program`."""
    return assemble_program(extract_program(text, _truth(task).get("entry_point") or ""), task)


def _cases(specs: list[dict[str, Any]]) -> list[Any]:
    from toolgym.sandbox import TestCase

    return [TestCase(**s) for s in specs]


def public_test_cases(task: Task) -> list[Any]:
    return _cases(_truth(task).get("public") or [])


def hidden_test_cases(task: Task) -> list[Any]:
    return _cases(_truth(task).get("hidden") or [])


def judge_options(task: Task) -> dict[str, Any]:
    """The task's own judge keywords (a Kattis package's validator and limits), else none."""
    return dict(_truth(task).get("judge") or {})


async def run_judge(sb: Any, program: str, tests: list[Any], mode: str, time_limit_s: float = 2.0,
                    options: dict[str, Any] | None = None) -> Any:
    """The sandbox judge, async (micro-batched across concurrent episodes on one sandbox). `options`:
    further `judge` keywords, e.g. a Kattis package's validator and limits (its time limit wins)."""
    from toolgym.sandbox.judging import ajudge

    return await ajudge(sb, program, tests, mode, **{"time_limit_s": time_limit_s, **(options or {})})
