"""`toolgym bench` from the command line: list, run with a completions file, compare, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-c", "from toolgym.cli import main; main()"]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600)


def test_list_json() -> None:
    r = _run("bench", "list", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert set(data) == {"code", "science", "math"}


@pytest.mark.slow
def test_errors_are_one_line(tmp_path: Path) -> None:
    r = _run("bench", "nosuch", "--model", "m", "--out", str(tmp_path / "o"))
    assert r.returncode != 0 and r.stderr.strip().startswith("error: unknown suite") and "Traceback" not in r.stderr
    r = _run("bench", "math", "--model", "m", "--mode", "chat", "--out", str(tmp_path / "o"))
    assert r.returncode != 0 and r.stderr.strip().startswith("error: unknown mode 'chat'; known: tools, generate, loglik")
    r = _run("bench", "compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    assert r.returncode != 0 and "not found" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_run_yaml_suite_and_compare(tmp_path: Path) -> None:
    data = tmp_path / "q.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": "?", "answer": str(i)}) + "\n" for i in range(8)))
    suite = tmp_path / "s.yaml"
    suite.write_text(f"name: s\nentries:\n  - name: m\n    env: toolgym/MathTIR-v0\n    source: 'asset:{data}'\n"
                     "    metric: pass@1\n    options: {dataset: gsm8k}\n")
    for name, right in (("a", 2), ("b", 8)):
        comp = tmp_path / f"{name}.jsonl"
        comp.write_text("".join(json.dumps({"id": f"q{i}", "completion": f"\\boxed{{{i if i < right else -1}}}"}) + "\n"
                                for i in range(8)))
        r = _run("bench", str(suite), "--model", name, "--completions", str(comp), "--out", str(tmp_path / name), "--json")
        assert r.returncode == 0, r.stderr
        rep = json.loads(r.stdout)
        assert rep["entries"]["m"]["metrics"]["pass@1"]["mean"] == right / 8
    r = _run("bench", "compare", str(tmp_path / "a"), str(tmp_path / "b" / "report.json"), "--json")
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(r.stdout)["entries"]
    assert row["delta"] == 0.75 and row["discordant"] == [0, 6]
    r = _run("bench", "compare", str(tmp_path / "a"), str(tmp_path / "b"))
    assert "+75.0" in r.stdout


@pytest.mark.slow
def test_code_suite_in_tools_mode_runs_a_kattis_entry(tmp_path: Path, tiny_dir: Path) -> None:
    """`toolgym bench code --mode tools` with a kattis: source: once "tools mode cannot load source" aborted
    the whole run; now its episodes run in CodeContest-v0 on the package, judged by its validator."""
    import os

    pkg = tmp_path / "kattis" / "hello"
    (pkg / "data" / "secret").mkdir(parents=True)
    (pkg / "problem.yaml").write_text("name: Hello\n")
    (pkg / "problem_statement").mkdir()
    (pkg / "problem_statement" / "problem.en.tex").write_text("\\problemname{Hello}\nPrint hello.\n")
    (pkg / "data" / "secret" / "1.in").write_text("\n")
    (pkg / "data" / "secret" / "1.ans").write_text("hello\n")
    r = subprocess.run([*CLI, "bench", "code", "--mode", "tools", "--subset", "kattis", "--model", str(tiny_dir),
                        "--limit", "1", "--max-tokens", "4", "--max-turns", "1", "--sandbox", "local",
                        "--out", str(tmp_path / "o"), "--json"], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "TOOLGYM_KATTIS_DIR": str(tmp_path / "kattis")})
    if "local sandbox" in r.stderr and "unavailable" in r.stderr:  # pragma: no cover - bubblewrap missing
        from tests.requirements import need

        need(False, r.stderr.strip())
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["entries"]["kattis"]["n"] == 1 and rep["skipped"] == {}
    (rec,) = [json.loads(x) for x in (tmp_path / "o" / "records.jsonl").read_text().splitlines()]
    assert rec["id"] == "hello" and rec["kind"] == "tools" and rec["samples"][0]["turns"]
