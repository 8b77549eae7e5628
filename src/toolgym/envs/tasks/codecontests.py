"""CodeContests records (DeepMind's code_contests rows), parsed once for the environments and the suites.

Row fields used: name, description, public_tests / private_tests / generated_tests (each
{"input": [...], "output": [...]}), time_limit ({"seconds", "nanos"} or seconds), difficulty,
cf_rating. All tests are stdio: {"input", "output"} (the sandbox judge's `TestCase` fields).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.envs.sources import TaskValidationError, require
from toolgym.envs.tasks._files import data_files, iter_records
from toolgym.envs.tasks.code_task import STDIO_HINT, code_task
from toolgym.envs.tasks.family import TaskFamily, register_family
from toolgym.envs.tasks.styles import PromptStyle
from toolgym.envs.types import Task

TEST_GROUPS = ("public_tests", "private_tests", "generated_tests")


def time_limit_s(raw: Any) -> float | None:
    """The record's per-test time limit in seconds, or None when it states none."""
    if isinstance(raw, dict):
        s = float(raw.get("seconds") or 0) + float(raw.get("nanos") or 0) / 1e9
        return s if s > 0 else None
    if isinstance(raw, (int, float)) and not isinstance(raw, bool) and raw > 0:
        return float(raw)
    return None


@dataclass
class Problem:
    """One parsed record: its tests by group, in TEST_GROUPS order."""

    id: str
    text: str
    tests: dict[str, list[dict[str, str]]]
    time_limit_s: float | None = None
    info: dict[str, Any] = field(default_factory=dict)  # difficulty, cf_rating

    def group_tests(self, groups: tuple[str, ...] = TEST_GROUPS) -> list[dict[str, str]]:
        return [t for g in groups for t in self.tests.get(g, [])]


def parse_record(row: dict[str, Any], index: int | None = None, *, where: str = "") -> Problem:
    """A Problem; a group whose inputs and outputs differ in number raises TaskValidationError."""
    try:
        text = require(row, "description")
    except TaskValidationError as exc:
        raise TaskValidationError(f"{where}{exc}") from None
    tests: dict[str, list[dict[str, str]]] = {}
    for g in TEST_GROUPS:
        block = row.get(g) or {}
        if not isinstance(block, dict):
            raise TaskValidationError(f"{where}field {g!r} must be an object with 'input' and 'output' lists")
        ins, outs = block.get("input") or [], block.get("output") or []
        if len(ins) != len(outs):
            raise TaskValidationError(f"{where}field {g!r}: {len(ins)} inputs but {len(outs)} outputs")
        tests[g] = [{"input": str(a), "output": str(b)} for a, b in zip(ins, outs, strict=True)]
    name = row.get("name") or row.get("id")
    return Problem(id=str(name if name is not None else index), text=text, tests=tests,
                   time_limit_s=time_limit_s(row.get("time_limit")),
                   info={"difficulty": row.get("difficulty"), "cf_rating": row.get("cf_rating")})


def cc_task(row: dict[str, Any], index: int | None = None, *, style: PromptStyle = "env", where: str = "") -> Task:
    """A stdio Task: the public tests shown, all groups hidden; the record's time limit is the task's own."""
    p = parse_record(row, index, where=where)
    if style == "env":
        text = f"{p.text}\n\n{STDIO_HINT}"
    else:
        text = (p.text.strip() + "\n\nRead the input from stdin and write the answer to stdout. "
                "Reply with a Python 3 program in one ```python block.")
    judge = {"time_limit_s": p.time_limit_s} if p.time_limit_s else None
    return code_task(p.id, text, "stdio", p.tests["public_tests"], p.group_tests(), "codecontests", judge=judge)


def load_tasks(path: str | Path, *, style: PromptStyle = "env") -> list[Task]:
    """Tasks of a CodeContests file or a folder of them."""
    return [cc_task(row, n, style=style, where=f"CodeContests {row.get('name') or row.get('id') or n}: ")
            for f in data_files(path) for n, row in enumerate(iter_records(f))]


def _task(row: dict[str, Any], index: int, *, style: PromptStyle, dataset: str, options: dict[str, Any]) -> Task:
    return cc_task(row, index, style=style)


def _read(path: str, *, style: PromptStyle, options: dict[str, Any], seed: int) -> list[Task]:
    return load_tasks(path, style=style)


def recognize(row: dict[str, Any]) -> str | None:
    """A bare record is CodeContests' when it has a `description` and `public_tests`."""
    return "codecontests" if "description" in row and "public_tests" in row else None


register_family(TaskFamily(name="codecontests", kind="code", task=_task, read=_read, recognizes=recognize,
                           time_limit_s=10.0, description="DeepMind CodeContests rows (codecontests:PATH): stdio"))
