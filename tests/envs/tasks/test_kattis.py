"""Kattis problem packages: parsing (problemtools' examples, BAPCtools' test problems, packages
built here in both format versions), malformed packages (one line naming the file, the others
still load and run), and a code-suite run over a folder of packages from a completions file."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tests.kattis_data import cached_testdata
from toolgym.envs.kattis import PackageError, load_packages, load_problem
from toolgym.envs.tasks.catalog import load
from toolgym.errors import AssetError
from toolgym.suites.registry import suite_from_dict
from toolgym.suites.runner import BenchConfig, run_benchmark


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


# a legacy package on the default validator with a float tolerance
ROUND = {"problem.yaml": "name: Halve\nvalidator_flags: float_tolerance 1e-3\n",
         "problem_statement/problem.en.tex": "\\problemname{Halve}\nPrint half of $n$.\n",
         "data/sample/1.in": "3\n", "data/sample/1.ans": "1.5\n",
         "data/secret/big.in": "1000001\n", "data/secret/big.ans": "500000.5\n"}
# a 2025-09 package with a Python output validator taking an argument from data/test_group.yaml
DOUBLE_VALIDATOR = """import sys
n = int(open(sys.argv[1]).read())
factor = int(sys.argv[sys.argv.index("--factor") + 1])
team = sys.stdin.read().split()
if team != [str(factor * n)]:
    open(sys.argv[3] + "judgemessage.txt", "w").write("expected %d" % (factor * n))
    sys.exit(43)
sys.exit(42)
"""
DOUBLE = {"problem.yaml": "problem_format_version: 2025-09\nname:\n  en: Double\ntype: pass-fail\n"
                          "limits:\n  time_limit: 4\n  memory: 256\n",
          "statement/problem.en.md": "Print twice $n$.\n",
          "output_validator/validate.py": DOUBLE_VALIDATOR,
          "data/test_group.yaml": "output_validator_args: [--factor, 2]\n",
          "data/sample/1.in": "4\n", "data/sample/1.ans": "8\n",
          "data/secret/1.in": "21\n", "data/secret/1.ans": "42\n"}
STATEMENT = {"statement/problem.en.md": "x\n"}
BROKEN = {
    "noans": {"problem.yaml": "name: x\n", **STATEMENT, "data/secret/1.in": "1\n"},
    "badyaml": {"problem.yaml": "name: [unclosed\n", **STATEMENT, "data/secret/1.in": "1\n", "data/secret/1.ans": "1\n"},
    "badpy": {"problem.yaml": "name: x\n", **STATEMENT, "data/secret/1.in": "1\n", "data/secret/1.ans": "1\n",
              "output_validators/v/validate.py": "def broken(:\n"},
    "multipass": {"problem.yaml": "type: multi-pass\n", **STATEMENT, "data/secret/1.in": "1\n",
                  "data/secret/1.ans": "1\n", "output_validator/v.py": "import sys\nsys.exit(42)\n"},
}
# loads (it takes a compiler to see it), and every judgement of it is a judge error naming the file
BADCPP = {"problem.yaml": "name: x\n", **STATEMENT, "data/sample/1.in": "1\n", "data/sample/1.ans": "1\n",
          "output_validator/validate.cc": "int main() { return 42 }\n"}


def packages(tmp_path: Path) -> Path:
    root = tmp_path / "problems"
    write(root / "halve", ROUND)
    write(root / "double", DOUBLE)
    write(root / "badcpp", BADCPP)
    for name, files in BROKEN.items():
        write(root / name, files)
    return root


def test_problemtools_examples_parse():
    root = cached_testdata("problemtools-1.20260907") / "examples"
    different, guess, hello, oddecho = (load_problem(root / n) for n in ("different", "guess", "hello", "oddecho"))
    assert different.validator["language"] == "cpp" and sorted(different.validator["sources"]) == ["validate.cc",
                                                                                                   "validate.h"]
    assert [t.name for t in different.tests()] == ["sample/1", "secret/01", "secret/02_extreme_cases"]
    assert different.name == "A Different Problem" and not different.interactive
    assert guess.interactive and guess.type == "interactive" and not guess.samples and len(guess.secret) == 10
    assert len(guess.sample_interactions) == 2 and "interactive" in guess.prompt()
    assert hello.memory_mb == 512 and hello.validator is None and hello.judge_options() == {
        "checker": "kattis", "checker_args": [], "memory_mb": 512}
    assert oddecho.type == "scoring" and len(oddecho.samples) == 2 and len(oddecho.secret) == 16
    assert oddecho.secret[0].name == "secret/subtask1/1"  # sub-groups, in natural order
    assert "Odd Echo" in oddecho.prompt() and oddecho.samples[0].input.strip() in oddecho.prompt()


def test_bapctools_problems_parse_and_unsupported_ones_say_why():
    root = cached_testdata("bapctools-2026.10.0") / "test" / "problems"
    fltcmp = load_problem(root / "fltcmp")
    assert fltcmp.flags == ["float_tolerance", "1E-6"] and fltcmp.time_limit_s == 1.0  # from data/test_group.yaml
    inter = load_problem(root / "pseudointeraction")
    assert inter.interactive and inter.validator["language"] == "python" and inter.validator["entry"] == "interactor.py"
    with pytest.raises(PackageError, match=r"multipass/problem.yaml: multi-pass problems are not supported"):
        load_problem(root / "multipass")
    with pytest.raises(PackageError, match=r"boolfind/output_validator: validators built by build/run scripts"):
        load_problem(root / "boolfind")


def test_malformed_packages_give_one_line_naming_the_file_and_the_rest_load(tmp_path, caplog):
    root = packages(tmp_path)
    with caplog.at_level(logging.WARNING, logger="toolgym.envs.tasks.kattis"):
        problems, errors = load_packages(root)
    assert sorted(p.id for p in problems) == ["badcpp", "double", "halve"]
    assert len(errors) == 4 and all("\n" not in e for e in errors)
    by = {Path(e.split(":")[0]).relative_to(root).parts[0]: e for e in errors}
    assert by["noans"] == f"{root}/noans/data/secret/1.in: no matching answer file 1.ans"
    assert by["badyaml"].startswith(f"{root}/badyaml/problem.yaml: invalid YAML (line 2): expected ',' or ']'")
    assert by["badpy"].startswith(f"{root}/badpy/output_validators/v/validate.py:1: the output validator does not compile")
    assert by["multipass"] == f"{root}/multipass/problem.yaml: multi-pass problems are not supported"
    assert len(caplog.records) == 4
    double = next(p for p in problems if p.id == "double")
    assert double.judge_options()["validator"]["args"] == ["--factor", "2"]
    assert double.judge_options()["time_limit_s"] == 4.0 and double.name == "Double"


def test_kattis_source_strings(tmp_path):
    root = packages(tmp_path)
    loaded = load(f"kattis:{root}", style="generate", options={"time_limit_s": 3})
    assert (loaded.dataset, loaded.kind) == ("kattis", "code")
    by = {t.id: t for t in loaded.tasks}
    assert by["halve"].ground_truth["judge"]["time_limit_s"] == 3.0  # for packages that state none
    assert by["double"].ground_truth["judge"]["time_limit_s"] == 4.0  # a package's own limit wins
    assert by["halve"].ground_truth["judge"] == {"checker": "kattis", "checker_args": ["float_tolerance", "1e-3"],
                                                 "time_limit_s": 3.0}
    gt = by["double"].ground_truth
    assert [t["output"] for t in gt["hidden"]] == ["8\n", "42\n"] and gt["mode"] == "stdio"
    env_prompts = {t.id: t.prompt for t in load(f"kattis:{root}", style="env").tasks}
    assert by["double"].prompt == env_prompts["double"]  # the same prompt in every style
    assert len(load(f"kattis:{root}/halve").tasks) == 1  # one package folder works too
    with pytest.raises(AssetError, match="no such folder"):
        load(f"kattis:{tmp_path}/nowhere")


def test_code_suite_runs_a_folder_of_packages(tmp_path, caplog):
    root = packages(tmp_path)
    suite = suite_from_dict({"name": "k", "entries": [
        {"name": "kattis", "env": "toolgym/CodeContest-v0", "source": f"kattis:{root}", "metric": "pass@1"}]})

    def answer(code: str) -> str:
        return f"```python\n{code}\n```"

    comp = tmp_path / "c.jsonl"
    comp.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "halve", "completions": [answer("print(int(input()) / 2 + 0.0004)"), answer("print(int(input()) // 2)")]},
        {"id": "double", "completions": [answer("print(2 * int(input()))"), answer("print(3 * int(input()))")]},
        {"id": "badcpp", "completions": [answer("print(input())")] * 2},
    ]))
    cfg = BenchConfig(suite="k", model="file", mode="generate", samples=2, temperature=1.0, completions=str(comp))
    with caplog.at_level(logging.WARNING):
        rep = run_benchmark(cfg, tmp_path / "run", log=lambda m: None, suite=suite)
    assert rep["entries"]["kattis"]["task_scores"] == {"halve": 0.5, "double": 0.5, "badcpp": 0.0}
    records = {r["id"]: r for r in map(json.loads, (tmp_path / "run" / "records.jsonl").read_text().splitlines())}
    assert records["double"]["samples"][1]["statuses"] == ["WA", "WA"]
    bad = records["badcpp"]["samples"][0]
    assert bad["statuses"] == ["JE"] and "badcpp/output_validator: does not compile: validate.cc:1:" in bad["error"]
    je_lines = [r.getMessage() for r in caplog.records if "does not compile: validate.cc" in r.getMessage()]
    assert len(je_lines) == 1  # said once for the task, not once per sample
    loaded = [r.getMessage() for r in caplog.records if r.name == "toolgym.envs.tasks.kattis"]
    assert len(loaded) == 4  # the four malformed packages, one line each
