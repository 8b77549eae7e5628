"""LiveCodeBench `code_generation_lite` files (test.jsonl, test2.jsonl, ... from its release folder).

Each row: question_title, question_content, platform, question_id, contest_date, starter_code,
difficulty, public_test_cases and private_test_cases (JSON strings of
[{"input", "output", "testtype": "stdin" | "functional"}]), metadata (JSON, "func_name" for
functional problems). Newer releases store private tests as base64(zlib(pickle(json string))).
Unpickling runs code chosen by whoever made the file, so toolgym refuses those rows unless the
caller passes trust_pickle=True (`--trust-pickle` on the CLI); even then it uses an unpickler
that may build only plain strings, numbers, lists and dicts (no classes, no callables).
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import zlib
from pathlib import Path
from typing import Any

from toolgym.errors import ConfigError
from toolgym.suites.loaders._files import data_files, iter_records
from toolgym.suites.tasks import CodeTest, EvalTask


class _PlainUnpickler(pickle.Unpickler):
    """Refuses every global: only builtin containers and scalars can be rebuilt."""

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a test-case file")


def decode_tests(raw: Any, *, trust_pickle: bool = False, where: str = "") -> list[dict[str, Any]]:
    """Test cases from a JSON string / list, or from the compressed pickle form (opt-in)."""
    if isinstance(raw, list):
        return raw
    if raw is None or raw == "":
        return []
    s = str(raw)
    try:
        return json.loads(s)
    except json.JSONDecodeError:
        pass
    if not trust_pickle:
        raise ConfigError(
            f"{where}: private tests are pickled (base64+zlib+pickle); toolgym does not unpickle by default. "
            "Pass --trust-pickle (trust_pickle=True) if you trust this file's origin"
        )
    try:
        blob = zlib.decompress(base64.b64decode(s.encode("utf-8")))
        obj = _PlainUnpickler(io.BytesIO(blob)).load()
    except (ValueError, zlib.error, pickle.UnpicklingError, EOFError) as exc:
        raise ConfigError(f"{where}: cannot decode private tests ({exc})") from None
    return json.loads(obj) if isinstance(obj, (str, bytes)) else list(obj)


def _functional_test(func: str, case: dict[str, Any]) -> CodeTest:
    args = [json.loads(line) for line in str(case["input"]).split("\n") if line.strip()]
    expected = json.loads(str(case["output"]))
    code = (f"_args = {args!r}\n_expected = {expected!r}\n_got = Solution().{func}(*_args)\n"
            f"assert _got == _expected, f'expected {{_expected!r}}, got {{_got!r}}'\n")
    return CodeTest(code=code)


def lcb_task(row: dict[str, Any], *, trust_pickle: bool = False, include_private: bool = True) -> EvalTask:
    qid = str(row.get("question_id") or row.get("id"))
    where = f"LiveCodeBench {qid}"
    cases = decode_tests(row.get("public_test_cases"), where=where)
    if include_private:
        cases += decode_tests(row.get("private_test_cases"), trust_pickle=trust_pickle, where=where)
    meta = row.get("metadata") or {}
    if isinstance(meta, str):
        meta = json.loads(meta) if meta.strip() else {}
    functional = bool(cases) and cases[0].get("testtype") == "functional"
    starter = str(row.get("starter_code") or "")
    prompt = str(row.get("question_content") or "").strip()
    if functional:
        func = meta.get("func_name")
        if not func:
            raise ConfigError(f"{where}: functional tests need metadata.func_name")
        tests = [_functional_test(func, c) for c in cases]
        prompt += f"\n\nComplete this code:\n```python\n{starter}\n```\nReply with the complete class in one ```python block."
        mode = "function"
    else:
        tests = [CodeTest(input=str(c["input"]), output=str(c["output"])) for c in cases]
        prompt += "\n\nRead the input from stdin and write the answer to stdout. Reply with a Python program in one ```python block."
        mode = "stdio"
    prefix = "from typing import *\nfrom collections import *\nimport math, heapq, bisect, itertools, functools\n" if functional else ""
    return EvalTask(
        id=qid, kind="code", prompt=prompt, tests=tests, test_mode=mode, program_prefix=prefix,
        metadata={"dataset": "livecodebench", "platform": row.get("platform"), "difficulty": row.get("difficulty"),
                  "contest_date": str(row.get("contest_date") or ""), "title": row.get("question_title")},
    )


def load_livecodebench(path: str | Path, *, trust_pickle: bool = False, since: str | None = None,
                       until: str | None = None, include_private: bool = True) -> list[EvalTask]:
    """Tasks from a code_generation_lite folder (all test*.jsonl) or one file; filter by contest date."""
    tasks = []
    for f in data_files(path, "test*"):
        for row in iter_records(f):
            date = str(row.get("contest_date") or "")[:10]
            if (since and date < since) or (until and date > until):
                continue
            tasks.append(lcb_task(row, trust_pickle=trust_pickle, include_private=include_private))
    return tasks
