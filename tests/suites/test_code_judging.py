"""Code entries end to end on real sandboxes: function-mode (HumanEval-format records) and stdio
(CodeContests-format file), completions judged in parallel, pass@k from the verdicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.requirements import need
from toolgym.envs.tasks.code_task import extract_program, submitted_program
from toolgym.envs.tasks.function_sets import humaneval_task
from toolgym.errors import SandboxUnavailable
from toolgym.suites.registry import suite_from_dict
from toolgym.suites.runner import BenchConfig, run_benchmark

HE = [
    {"id": "T/0", "prompt": "def add(a: int, b: int) -> int:\n    \"\"\"Sum.\"\"\"\n", "canonical_solution": "    return a + b\n",
     "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(-1, 1) == 0\n", "entry_point": "add"},
    {"id": "T/1", "prompt": "import math\n\ndef root(x: float) -> float:\n", "canonical_solution": "    return math.sqrt(x)\n",
     "test": "def check(candidate):\n    assert candidate(9) == 3\n", "entry_point": "root"},
]


def test_extract_and_build_program() -> None:
    t = humaneval_task(HE[1], 0, "generate")
    assert extract_program("text\n```python\nx = 1\n```\nmore\n```python\ny = 2\n```") == "y = 2\n"
    usage = "```python\ndef f(a):\n    return a\n```\nExample usage:\n```python\nprint(f(1))\n```"
    assert extract_program(usage, "f") == "def f(a):\n    return a\n"  # the defining block, not the usage
    assert extract_program(usage) == "print(f(1))\n"
    assert submitted_program("    return math.sqrt(x)\n", t).startswith("import math\n\ndef root")  # a continuation
    full = submitted_program("```python\ndef root(x):\n    return math.sqrt(x)\n```", t)
    assert full.startswith("import math\n") and full.count("def root") == 1  # imports of the prompt kept


@pytest.mark.slow
def test_code_entries_judged_in_sandbox(tmp_path: Path) -> None:
    he = tmp_path / "he.jsonl"
    he.write_text("".join(json.dumps(r) + "\n" for r in HE))
    cc = tmp_path / "cc.jsonl"
    cc.write_text(json.dumps({"name": "sum", "description": "Print a+b.",
                              "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
                              "private_tests": {"input": ["5 5\n"], "output": ["10\n"]}}) + "\n")
    suite = suite_from_dict({"name": "c", "entries": [
        {"name": "he", "env": "toolgym/CodeContest-v0", "source": f"asset:{he}", "metric": "pass@2",
         "options": {"dataset": "humaneval"}},
        {"name": "cc", "env": "toolgym/CodeContest-v0", "source": f"codecontests:{cc}", "metric": "pass@1"},
    ]})
    comp = tmp_path / "comp.jsonl"
    rows = [
        {"entry": "he", "id": "T/0", "completions": ["    return a + b\n", "```python\ndef add(a, b):\n    return a - b\n```"]},
        {"entry": "he", "id": "T/1", "completions": ["    return x\n", "    while True:\n        pass\n"]},
        {"entry": "cc", "id": "sum", "completions": ["```python\na, b = map(int, input().split())\nprint(a + b)\n```",
                                                     "import sys; sys.exit(0)"]},
    ]
    comp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = BenchConfig(suite="c", model="file", samples=2, temperature=1.0, completions=str(comp), concurrency=6)
    try:
        rep = run_benchmark(cfg, tmp_path / "out", log=lambda m: None, suite=suite)
    except SandboxUnavailable as exc:
        need(False, f"no sandbox: {exc}")
        raise
    he_m = rep["entries"]["he"]
    assert he_m["task_scores"] == {"T/0": 1.0, "T/1": 0.0}  # pass@2: T/0 has one right sample of two
    assert he_m["metrics"]["pass@1"]["mean"] == pytest.approx(0.25)
    assert rep["entries"]["cc"]["metrics"]["pass@1"]["mean"] == pytest.approx(0.5)  # exit(0) is no pass
    recs = {(r["entry"], r["id"]): r for r in map(json.loads, (tmp_path / "out" / "records.jsonl").read_text().splitlines())}
    assert recs[("he", "T/1")]["samples"][1]["statuses"] == ["TLE"]
    assert recs[("cc", "sum")]["samples"][0]["passed"] == 2
