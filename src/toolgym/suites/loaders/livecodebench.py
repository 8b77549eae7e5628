"""LiveCodeBench `code_generation_lite` files (test.jsonl, test2.jsonl, ... from its release folder).

The records are parsed by `toolgym.envs.tasks.livecodebench` (the environments' parser too), so
generate mode judges the same call-form tests as tools mode; pickled private tests stay opt-in
(trust_pickle=True, `--trust-pickle` on the CLI).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolgym.envs.tasks._files import data_files, iter_records
from toolgym.envs.tasks.livecodebench import decode_tests, parse_record
from toolgym.suites.eval_task import CodeTest, EvalTask

__all__ = ["decode_tests", "lcb_task", "load_livecodebench"]  # decode_tests: its old import path


def lcb_task(row: dict[str, Any], *, trust_pickle: bool = False, include_private: bool = True) -> EvalTask:
    """An EvalTask from one record, parsed as the environments parse it (functional tests in call form)."""
    qid = str(row.get("question_id") or row.get("id"))
    p = parse_record(row, trust_pickle=trust_pickle, include_private=include_private, where=f"LiveCodeBench {qid}: ")
    prompt = p.text.strip()
    if p.mode == "function":
        tests = [CodeTest(call=t["call"], args=t["args"], expected=t["expected"]) for t in p.public + p.private]
        prompt += (f"\n\nComplete this code:\n```python\n{p.starter}\n```\n"
                   "Reply with the complete class in one ```python block.")
    else:
        tests = [CodeTest(input=t["input"], output=t["output"]) for t in p.public + p.private]
        prompt += ("\n\nRead the input from stdin and write the answer to stdout. "
                   "Reply with a Python program in one ```python block.")
    return EvalTask(
        id=p.id, kind="code", prompt=prompt, tests=tests, test_mode="function" if p.mode == "function" else "stdio",
        program_prefix=p.prefix, metadata={"dataset": "livecodebench", **p.info},
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
