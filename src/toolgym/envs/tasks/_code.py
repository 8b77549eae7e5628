"""Code-task plumbing: record adapters for HumanEval, MBPP, LeetCode, LiveCodeBench and
CodeContests formats, and the async bridge to the sandbox judge.

Tests live in `Task.ground_truth` ({"mode", "public", "hidden", "entry_point"}), never in
metadata, so hidden tests do not travel in `info` to the agent.
"""

from __future__ import annotations

from typing import Any

from toolgym.envs.sources import TaskValidationError, require
from toolgym.envs.tasks import codecontests, function_sets, livecodebench
from toolgym.envs.tasks.function_sets import humaneval_test_code as humaneval_test_code  # its old import path
from toolgym.envs.types import Task


def _task(tid: str, text: str, mode: str, public: list[dict], hidden: list[dict], source: str,
          entry_point: str | None = None, prefix: str = "") -> Task:
    if not hidden:
        raise TaskValidationError("no hidden tests: the problem cannot be scored")
    return Task(id=tid, prompt=[{"role": "user", "content": text}],
                ground_truth={"mode": mode, "public": public, "hidden": hidden, "entry_point": entry_point,
                              "prefix": prefix},
                metadata={"source": source, "mode": mode, "num_public_tests": len(public), "num_hidden_tests": len(hidden)})


FUNCTION_HINT = "Write a Python solution in one ```python code block."
STDIO_HINT = "Write a Python program that reads from standard input and writes to standard output, in one ```python code block."


def _humaneval(row: dict[str, Any], i: int) -> Task:
    p = function_sets.humaneval(row, i)
    text = f"Complete this Python function.\n```python\n{p.text}```\n{FUNCTION_HINT}"
    return _task(p.id, text, "function", [], [{"code": t} for t in p.tests], "humaneval", p.entry_point,
                 prefix=p.prefix)


def _mbpp(row: dict[str, Any], i: int) -> Task:
    p = function_sets.mbpp(row, i)
    hidden = [{"code": t} for t in p.tests]
    text = f"{p.text}\nYour code should pass this test:\n{p.shown_tests[0]}\n{FUNCTION_HINT}" if p.shown_tests else p.text
    return _task(p.id, text, "function", hidden[:1], hidden, "mbpp", p.entry_point or None)


def _leetcode(row: dict[str, Any], i: int) -> Task:
    p = function_sets.leetcode(row, i)
    hidden = [{"code": t} for t in p.tests]
    text = f"{p.text}\n\nStart from:\n```python\n{p.starter}\n```\n{FUNCTION_HINT}"
    return _task(p.id, text, "function", hidden[:1], hidden, "leetcode", p.entry_point or None, prefix=p.prefix)


def _livecodebench(row: dict[str, Any], i: int) -> Task:
    p = livecodebench.parse_record(row, i)
    hidden = p.public + p.private
    if p.mode == "function":
        prompt = f"{p.text}\n\nStart from:\n```python\n{p.starter}\n```\n{FUNCTION_HINT}"
        return _task(p.id, prompt, "function", p.public, hidden, "livecodebench", p.func, prefix=p.prefix)
    return _task(p.id, f"{p.text}\n\n{STDIO_HINT}", "stdio", p.public, hidden, "livecodebench")


def _codecontests(row: dict[str, Any], i: int) -> Task:
    p = codecontests.parse_record(row, i)
    public = p.tests["public_tests"]
    return _task(p.id, f"{p.text}\n\n{STDIO_HINT}", "stdio", public, p.group_tests(), "codecontests")


def _generic(row: dict[str, Any], i: int) -> Task:
    text = require(row, "prompt")
    mode = row.get("mode", "stdio")
    if mode not in ("stdio", "function"):
        raise TaskValidationError(f"field 'mode' must be 'stdio' or 'function', got {mode!r}")
    tests = require(row, "tests", list)
    public = row.get("public_tests") or []
    return _task(str(row.get("id", i)), f"{text}\n\n{STDIO_HINT if mode == 'stdio' else FUNCTION_HINT}", mode,
                 public, tests, "custom", row.get("entry_point"))


def code_adapter(row: dict[str, Any], index: int) -> Task:
    """Detect the record's format (HumanEval, MBPP, LeetCode, LiveCodeBench, CodeContests, generic)."""
    if "canonical_solution" in row and "test" in row:
        return _humaneval(row, index)
    if "test_setup" in row:
        return _leetcode(row, index)
    if "question_content" in row:
        return _livecodebench(row, index)
    if "description" in row and "public_tests" in row:
        return _codecontests(row, index)
    if "tests" in row and isinstance(row.get("tests"), list) and row["tests"] and isinstance(row["tests"][0], str):
        return _mbpp(row, index)
    return _generic(row, index)


def _cases(specs: list[dict[str, Any]]) -> list[Any]:
    from toolgym.sandbox import TestCase

    return [TestCase(**s) for s in specs]


def public_test_cases(task: Task) -> list[Any]:
    gt = task.ground_truth if isinstance(task.ground_truth, dict) else {}
    return _cases(gt.get("public") or [])


def hidden_test_cases(task: Task) -> list[Any]:
    gt = task.ground_truth if isinstance(task.ground_truth, dict) else {}
    return _cases(gt.get("hidden") or [])


def assemble_program(code: str, task: Task) -> str:
    """HumanEval answers that only give the body get the prompt (signature and imports) prepended."""
    gt = task.ground_truth if isinstance(task.ground_truth, dict) else {}
    ep, prefix = gt.get("entry_point"), gt.get("prefix") or ""
    if prefix and ep and f"def {ep}" not in code:
        return prefix + code
    if prefix and ep:  # keep the prompt's imports (typing, math) available to the full function
        imports = "\n".join(ln for ln in prefix.splitlines() if ln.startswith(("import ", "from ")))
        return (imports + "\n" + code) if imports else code
    return code


async def run_judge(sb: Any, program: str, tests: list[Any], mode: str, time_limit_s: float = 2.0,
                    options: dict[str, Any] | None = None) -> Any:
    """The sandbox judge, async (micro-batched across concurrent episodes on one sandbox). `options`:
    further `judge` keywords, e.g. a Kattis package's validator and limits (its time limit wins)."""
    from toolgym.sandbox.judging import ajudge

    return await ajudge(sb, program, tests, mode, **{"time_limit_s": time_limit_s, **(options or {})})


def judge_options(task: Task) -> dict[str, Any]:
    """The task's own judge keywords (a Kattis package's validator and limits), else none."""
    gt = task.ground_truth if isinstance(task.ground_truth, dict) else {}
    return dict(gt.get("judge") or {})
