"""LiveCodeBench `code_generation_lite` records (test.jsonl, test2.jsonl, ... of its release folder): the
parser, the prompts of each style and the folder loader, for the environments and the suites alike.

Each row: question_id, question_title, question_content, platform, contest_date, difficulty,
starter_code, public_test_cases and private_test_cases (JSON strings of
[{"input", "output", "testtype": "stdin" | "functional"}]), metadata (JSON; "func_name" for
functional problems). Private tests may be compressed: base64(zlib(JSON)), or in newer releases
base64(zlib(pickle(JSON string))). Unpickling runs code chosen by whoever made the file, so pickled
tests are refused unless the caller passes trust_pickle=True (`--trust-pickle` on the CLI); even
then an unpickler that may build only plain strings, numbers, lists and dicts is used.

Functional tests come out in call form ({"call": "Solution().f", "args": [...], "expected": ...},
the sandbox judge's `TestCase` fields): the judge compares the JSON of the returned value in a
separate evaluator, so the expected value never sits in the submission's namespace (the assert form
did) and a tuple equals its list. Stdin tests come out as {"input", "output"}.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.envs.sources import TaskValidationError, require
from toolgym.envs.tasks._files import data_files, iter_records
from toolgym.envs.tasks.code_task import FUNCTION_HINT, STDIO_HINT, code_task
from toolgym.envs.tasks.family import TaskFamily, register_family
from toolgym.envs.tasks.styles import PromptStyle
from toolgym.envs.types import Task

# names LeetCode's starter code uses without importing them (List, Optional, deque, ...)
PREFIX = "from typing import *\nfrom collections import *\nimport math, heapq, bisect, itertools, functools\n"


class _PlainUnpickler(pickle.Unpickler):
    """Refuses every global: only builtin containers and scalars can be rebuilt."""

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a test-case file")


def decode_tests(raw: Any, *, trust_pickle: bool = False, where: str = "") -> list[dict[str, Any]]:
    """Test cases from a list, a JSON string, base64+zlib JSON, or (opt-in) base64+zlib+pickle."""
    if isinstance(raw, list):
        return raw
    if raw is None or raw == "":
        return []
    if not isinstance(raw, (str, bytes)):
        raise TaskValidationError(f"{where}: test cases must be a list or a JSON string, got {type(raw).__name__}")
    s = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    try:
        return json.loads(s)
    except ValueError:
        pass
    try:
        blob = zlib.decompress(base64.b64decode(s.encode("utf-8")))
    except (ValueError, zlib.error) as exc:
        raise TaskValidationError(f"{where}: test cases are neither JSON nor base64+zlib ({exc})") from None
    try:
        return json.loads(blob)
    except ValueError:
        pass
    if not trust_pickle:
        raise TaskValidationError(
            f"{where}: private tests are pickled (base64+zlib+pickle); toolgym does not unpickle by default. "
            "Pass --trust-pickle (trust_pickle=True) if you trust this file's origin")
    try:
        obj = _PlainUnpickler(io.BytesIO(blob)).load()
    except (ValueError, pickle.UnpicklingError, EOFError) as exc:
        raise TaskValidationError(f"{where}: cannot decode private tests ({exc})") from None
    return json.loads(obj) if isinstance(obj, (str, bytes)) else list(obj)


def _case(c: Any, func: str | None, where: str) -> dict[str, Any]:
    if not isinstance(c, dict):
        raise TaskValidationError(f"{where}: a test case must be an object, got {type(c).__name__}")
    kind = c.get("testtype", "stdin")
    if kind == "stdin":
        return {"input": str(c.get("input", "")), "output": str(c.get("output", ""))}
    if kind != "functional":
        raise TaskValidationError(f"{where}: unknown testtype {kind!r}")
    if not func:
        raise TaskValidationError(f"{where}: functional test but metadata has no func_name")
    try:  # one JSON value per input line
        args = [json.loads(line) for line in str(c.get("input", "")).split("\n") if line.strip()]
        expected = json.loads(str(c.get("output", "")))
    except ValueError as exc:
        raise TaskValidationError(f"{where}: functional input/output is not JSON ({exc})") from None
    return {"call": f"Solution().{func}", "args": args, "expected": expected}


@dataclass
class Problem:
    """One parsed record: mode "function" (call-form tests) or "stdio" (input/output tests)."""

    id: str
    text: str
    starter: str
    mode: str
    func: str | None
    public: list[dict[str, Any]]
    private: list[dict[str, Any]]
    info: dict[str, Any] = field(default_factory=dict)  # platform, difficulty, contest_date, title

    @property
    def prefix(self) -> str:
        """Imports a functional submission may assume (LeetCode starters name List, Optional...)."""
        return PREFIX if self.mode == "function" else ""


def parse_record(row: dict[str, Any], index: int | None = None, *, trust_pickle: bool = False,
                 include_private: bool = True, where: str = "") -> Problem:
    """A Problem from one record; a malformed record raises TaskValidationError naming the field."""
    try:
        text = require(row, "question_content")
    except TaskValidationError as exc:
        raise TaskValidationError(f"{where}{exc}") from None
    qid = row.get("question_id") or row.get("id")
    pid = str(qid if qid is not None else index)
    meta = row.get("metadata") or {}
    if isinstance(meta, str):
        try:
            meta = json.loads(meta) if meta.strip() else {}
        except ValueError:
            meta = {}
    func = meta.get("func_name") if isinstance(meta, dict) else None
    groups = ["public_test_cases"] + (["private_test_cases"] if include_private else [])
    parsed: dict[str, list[dict[str, Any]]] = {"private_test_cases": []}
    for name in groups:
        cases = decode_tests(row.get(name), trust_pickle=trust_pickle, where=f"{where}field {name!r}")
        if not isinstance(cases, list):
            raise TaskValidationError(f"{where}field {name!r} must hold a list of test cases")
        parsed[name] = [_case(c, func, f"{where}field {name!r} test {j}") for j, c in enumerate(cases)]
    tests = parsed["public_test_cases"] + parsed["private_test_cases"]
    functional = any("call" in t for t in tests)
    if functional and not all("call" in t for t in tests):
        raise TaskValidationError(f"{where}mixes stdin and functional tests")
    info = {"platform": row.get("platform"), "difficulty": row.get("difficulty"),
            "contest_date": str(row.get("contest_date") or ""), "title": row.get("question_title")}
    return Problem(id=pid, text=text, starter=str(row.get("starter_code") or ""),
                   mode="function" if functional else "stdio", func=func if functional else None,
                   public=parsed["public_test_cases"], private=parsed["private_test_cases"], info=info)


def lcb_task(row: dict[str, Any], index: int | None = None, *, style: PromptStyle = "env", trust_pickle: bool = False,
             include_private: bool = True, where: str = "") -> Task:
    """A Task from one record: call-form tests for functional problems, stdin/stdout tests otherwise."""
    p = parse_record(row, index, trust_pickle=trust_pickle, include_private=include_private, where=where)
    hidden = p.public + p.private
    if p.mode == "function":
        if style == "env":
            text = f"{p.text}\n\nStart from:\n```python\n{p.starter}\n```\n{FUNCTION_HINT}"
        else:
            text = (f"{p.text.strip()}\n\nComplete this code:\n```python\n{p.starter}\n```\n"
                    "Reply with the complete class in one ```python block.")
        return code_task(p.id, text, "function", p.public, hidden, "livecodebench", p.func, prefix=p.prefix)
    if style == "env":
        text = f"{p.text}\n\n{STDIO_HINT}"
    else:
        text = (f"{p.text.strip()}\n\nRead the input from stdin and write the answer to stdout. "
                "Reply with a Python program in one ```python block.")
    return code_task(p.id, text, "stdio", p.public, hidden, "livecodebench")


def load_tasks(path: str | Path, *, style: PromptStyle = "env", trust_pickle: bool = False, since: str | None = None,
               until: str | None = None, include_private: bool = True) -> list[Task]:
    """Tasks of a code_generation_lite folder (all test*.jsonl) or one file; `since`/`until` filter by contest date."""
    tasks = []
    for f in data_files(path, "test*"):
        for row in iter_records(f):
            date = str(row.get("contest_date") or "")[:10]
            if (since and date < since) or (until and date > until):
                continue
            qid = row.get("question_id") or row.get("id")
            tasks.append(lcb_task(row, len(tasks), style=style, trust_pickle=trust_pickle,
                                  include_private=include_private, where=f"LiveCodeBench {qid}: "))
    return tasks


def _task(row: dict[str, Any], index: int, *, style: PromptStyle, dataset: str, options: dict[str, Any]) -> Task:
    return lcb_task(row, index, style=style, trust_pickle=bool(options.get("trust_pickle")))


def _read(path: str, *, style: PromptStyle, options: dict[str, Any], seed: int) -> list[Task]:
    """options: since, until (contest dates), trust_pickle."""
    return load_tasks(path, style=style, trust_pickle=bool(options.get("trust_pickle")), since=options.get("since"),
                      until=options.get("until"))


def recognize(row: dict[str, Any]) -> str | None:
    """A bare record is LiveCodeBench's when it has a `question_content`."""
    return "livecodebench" if "question_content" in row else None


register_family(TaskFamily(name="livecodebench", kind="code", task=_task, read=_read, recognizes=recognize,
                           description="LiveCodeBench code_generation_lite (livecodebench:PATH)"))
