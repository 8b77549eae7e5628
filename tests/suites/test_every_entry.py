"""Every built-in suite entry through every mode it allows, end to end: real local data (the cached
assets, and small files written here in each local format for the optional entries), a real tiny model
(tests/suites/conftest.py) sampling and scoring, the local sandbox judging code. A source kind that one
mode cannot read (tools mode once aborted on `kattis:`) fails here. Also: an entry's tasks are one
pipeline, the same ids and ground truth in every mode, and tools mode's are the environment's own."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

import toolgym  # noqa: E402
from tests.requirements import need  # noqa: E402
from toolgym.errors import AssetError  # noqa: E402
from toolgym.suites.bench_config import MODES, BenchConfig  # noqa: E402
from toolgym.suites.entries import entry_tasks  # noqa: E402
from toolgym.suites.registry import builtin_suites  # noqa: E402
from toolgym.suites.runner import run_benchmark  # noqa: E402

LCB = [
    {"question_id": "abc001_a", "question_title": "Add", "question_content": "Read a and b, print a+b.",
     "platform": "atcoder", "contest_date": "2024-09-01T00:00:00", "starter_code": "", "difficulty": "easy",
     "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]),
     "private_test_cases": json.dumps([{"input": "5 7\n", "output": "12\n", "testtype": "stdin"}]), "metadata": "{}"},
    {"question_id": "1", "question_title": "Append", "question_content": "Return nums with k appended.",
     "platform": "leetcode", "contest_date": "2024-09-02T00:00:00", "difficulty": "easy",
     "starter_code": "class Solution:\n    def app(self, nums: List[int], k: int) -> List[int]:\n        ",
     "public_test_cases": json.dumps([{"input": "[1, 2]\n3", "output": "[1, 2, 3]", "testtype": "functional"}]),
     "private_test_cases": json.dumps([{"input": "[]\n5", "output": "[5]", "testtype": "functional"}]),
     "metadata": json.dumps({"func_name": "app"})},
]
CC = {"name": "sum", "description": "Print a+b.", "time_limit": {"seconds": 1, "nanos": 0},
      "public_tests": {"input": ["1 2\n"], "output": ["3\n"]}, "private_tests": {"input": ["5 5\n"], "output": ["10\n"]}}
GPQA_COLS = ["Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3",
             "Record ID", "High-level domain", "Subdomain"]
KATTIS = {"problem.yaml": "name: Halve\nvalidator_flags: float_tolerance 1e-3\n",
          "problem_statement/problem.en.tex": "\\problemname{Halve}\nPrint half of $n$.\n",
          "data/sample/1.in": "3\n", "data/sample/1.ans": "1.5\n",
          "data/secret/big.in": "1000001\n", "data/secret/big.ans": "500000.5\n"}


@pytest.fixture()
def local_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The optional entries' files, in their published formats, named by their variables."""
    lcb = tmp_path / "lcb"
    lcb.mkdir()
    (lcb / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in LCB))
    cc = tmp_path / "cc.jsonl"
    cc.write_text(json.dumps(CC) + "\n")
    gpqa = tmp_path / "gpqa_diamond.csv"
    with gpqa.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(GPQA_COLS)
        w.writerows([[f"Q{i}?", f"right{i}", f"a{i}", f"b{i}", f"c{i}", f"rec{i}", "Physics", "Optics"] for i in range(2)])
    aime = tmp_path / "aime.jsonl"
    aime.write_text(json.dumps({"ID": "2024-I-1", "Problem": "Find x.", "Answer": "033"}) + "\n")
    for rel, text in KATTIS.items():
        p = tmp_path / "kattis" / "halve" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for var, path in {"TOOLGYM_LCB_DIR": lcb, "TOOLGYM_CODECONTESTS": cc, "TOOLGYM_GPQA_CSV": gpqa,
                      "TOOLGYM_AIME_JSONL": aime, "TOOLGYM_KATTIS_DIR": tmp_path / "kattis"}.items():
        monkeypatch.setenv(var, str(path))


def _suite_or_skip(name: str):
    suite = builtin_suites()[name]
    for entry in suite.entries:
        if entry.source.startswith("asset:"):
            try:
                entry_tasks(entry, BenchConfig(suite=name, model="x", limit=1))
            except AssetError as exc:
                need(False, f"asset of {entry.name} is missing ({exc}): toolgym assets fetch")
    return suite


@pytest.fixture(scope="module")
def long_tiny_dir(tiny_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with room for the longest first prompt of a built-in entry (LeetCode's, in bytes)."""
    import shutil

    d = tmp_path_factory.mktemp("tiny-long")
    shutil.copytree(tiny_dir, d, dirs_exist_ok=True)
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, "max_position_embeddings": 16384}))
    return d


@pytest.fixture(scope="module")
def local_backend() -> str:
    from toolgym.sandbox import open_sandbox

    try:
        open_sandbox("local").close()
    except Exception as exc:  # bubblewrap missing
        need(False, f"the local sandbox is unavailable: {exc}")
    return "local"


# the code and science suites take over a second an entry (sandboxed grading, longer prompts): the slow tier
SLOW_SUITES = {"code", "science"}
SUITES = [pytest.param(s, marks=pytest.mark.slow) if s in SLOW_SUITES else s for s in sorted(builtin_suites())]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("suite_name", SUITES)
def test_every_builtin_entry_runs_in_every_mode(suite_name: str, mode: str, local_files: None, long_tiny_dir: Path,
                                                local_backend: str, tmp_path: Path) -> None:
    suite = _suite_or_skip(suite_name)
    cfg = BenchConfig(suite=suite_name, model=str(long_tiny_dir), mode=mode, limit=1, max_tokens=4, max_turns=2,
                      batch=1, sandbox_backend=local_backend)
    logs: list[str] = []
    rep = run_benchmark(cfg, tmp_path / "run", log=logs.append)
    records = [json.loads(x) for x in (tmp_path / "run" / "records.jsonl").read_text().splitlines()] \
        if (tmp_path / "run" / "records.jsonl").exists() else []
    for entry in suite.entries:
        loaded = entry_tasks(entry, cfg)
        if mode == "loglik" and loaded.kind != "mc":  # the one mode an entry may not allow, skipped with why
            assert rep["skipped"][entry.name] == "loglik mode scores multiple-choice entries only"
            continue
        assert entry.name not in rep["skipped"], (entry.name, rep["skipped"].get(entry.name))
        assert rep["entries"][entry.name]["n"] == 1, entry.name
        (rec,) = [r for r in records if r["entry"] == entry.name]
        assert rec["id"] == loaded.tasks[0].id
        assert rec["kind"] == {"tools": "tools", "loglik": "mc"}.get(mode, loaded.kind)
        if mode == "tools":
            assert all(len(s["turns"]) >= 1 for s in rec["samples"]), rec
            assert not any(s["error"] for s in rec["samples"]), rec
        if mode == "generate" and loaded.kind == "code":
            assert rec["samples"][0]["total"] == len(loaded.tasks[0].ground_truth["hidden"]), rec  # judged
        if mode == "loglik":
            assert len(rec["logliks"]) == len(loaded.tasks[0].metadata["choices"])


def _truth(task) -> object:
    gt = task.ground_truth
    return {k: v for k, v in gt.items() if k != "judge"} if isinstance(gt, dict) else gt


@pytest.mark.parametrize("suite_name", SUITES)
def test_an_entry_has_one_task_list_in_every_mode_and_tools_mode_sees_the_environments(
        suite_name: str, local_files: None) -> None:
    suite = _suite_or_skip(suite_name)
    for entry in suite.entries:
        by_mode = {m: entry_tasks(entry, BenchConfig(suite=suite_name, model="x", mode=m, limit=3)).tasks for m in MODES}
        ids = [t.id for t in by_mode["tools"]]
        assert len(ids) >= 1
        for m, tasks in by_mode.items():
            assert [(t.id, _truth(t)) for t in tasks] == [(t.id, _truth(t)) for t in by_mode["tools"]], (entry.name, m)
        # the environment reading the entry's source string itself holds the very tasks tools mode runs
        env = toolgym.make(entry.env, dataset=entry.source, source_options=dict(entry.options), limit=3, sandbox=None)
        source = env.unwrapped.source
        own = [source.get(i) for i in range(len(source))]
        env.close()
        assert [(t.id, t.prompt, _truth(t)) for t in own] == [(t.id, t.prompt, _truth(t)) for t in by_mode["tools"]], \
            entry.name
        if entry.name not in ("kattis",):  # a Kattis package has one prompt in every style
            assert by_mode["generate"][0].prompt != by_mode["tools"][0].prompt, entry.name
