"""Task families (`toolgym.envs.tasks.family`): a family written in ONE file of its own, registered by
``package.module:FAMILY`` or by an entry point, serves a suite entry and an environment; the built-in families
serve every source kind and asset dataset there were; the old import paths of moved modules still import."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import toolgym
from toolgym.envs.tasks import catalog
from toolgym.envs.tasks.family import FAMILIES, TaskFamily, register_family
from toolgym.errors import ConfigError
from toolgym.suites.registry import suite_from_dict
from toolgym.suites.runner import BenchConfig, run_benchmark

SRC = Path(__file__).resolve().parents[3] / "src"

# The whole family, as its author writes it: one file, ending in one register_family call.
FAMILY_FILE = '''\
"""Sums of two integers, from a JSON Lines file of {"id", "a", "b"} records (source string `NAME:PATH`)."""

import json

from toolgym.envs.tasks.family import TaskFamily, register_family
from toolgym.envs.types import Task


def task(row, index, *, style, dataset, options):
    """The record's Task; the suites' generate prompt asks for the \\\\boxed{} answer the grader reads."""
    question = f"What is {int(row['a'])} + {int(row['b'])}?"
    if style != "env":
        question += " Put the final answer in \\\\boxed{}."
    return Task(id=str(row.get("id", index)), prompt=[{"role": "user", "content": question}],
                ground_truth=str(int(row["a"]) + int(row["b"])))


def read(path, *, style, options, seed):
    with open(path, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    return [task(row, i, style=style, dataset="NAME", options=options) for i, row in enumerate(rows)]


FAMILY = register_family(TaskFamily(name="NAME", kind="math", task=task, read=read,
                                    description="sums of two integers"))
'''
RECORDS = [{"id": "s1", "a": 17, "b": 25}, {"id": "s2", "a": 1234, "b": 4321}, {"id": "s3", "a": -5, "b": 5}]


def write_family(folder: Path, name: str) -> Path:
    """The family module `name`.py and its data file; returns the data file."""
    (folder / f"{name}.py").write_text(FAMILY_FILE.replace("NAME", name), encoding="utf-8")
    data = folder / f"{name}.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    return data


@pytest.fixture
def one_file_family(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """(module name, data file) of a family in one file on sys.path, unregistered again afterwards."""
    name = "tg_sums_family"
    data = write_family(tmp_path, name)
    sys.path.insert(0, str(tmp_path))
    importlib.invalidate_caches()
    try:
        yield name, data
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)
        for key in (name, f"{name}:FAMILY"):
            FAMILIES.pop(key, None)


def test_a_family_in_one_file_serves_a_suite_entry_and_an_environment(one_file_family, tmp_path: Path) -> None:
    name, data = one_file_family
    assert name not in FAMILIES  # nothing but the file itself: no table names it
    source = f"{name}:FAMILY:{data}"  # package.module:FAMILY:PATH imports the family's module
    suite = suite_from_dict({"name": "sums", "entries": [
        {"name": "sums", "env": "toolgym/MathTIR-v0", "source": source, "metric": "avg@1"}]})
    assert name in FAMILIES and catalog.dataset_of(f"{name}:{data}") == name

    answers = tmp_path / "answers.jsonl"
    answers.write_text("".join(json.dumps({"id": i, "entry": "sums", "completion": c}) + "\n" for i, c in [
        ("s1", "17 + 25 = \\boxed{42}"), ("s2", "\\boxed{5000}"), ("s3", "The sum is \\boxed{0}.")]))
    cfg = BenchConfig(suite="sums", model="file", mode="generate", completions=str(answers))
    report = run_benchmark(cfg, tmp_path / "run", log=lambda line: None, suite=suite)
    assert report["entries"]["sums"]["task_scores"] == {"s1": 1.0, "s2": 0.0, "s3": 1.0}
    generate = catalog.load(source, style="generate").tasks[0]  # the prompt that run asked with
    assert generate.prompt[-1]["content"] == "What is 17 + 25? Put the final answer in \\boxed{}."

    env = toolgym.make("toolgym/MathTIR-v0", dataset=f"{name}:{data}", sandbox=None)  # now by its name
    try:
        obs, _ = env.reset(options={"index": 1})
        assert obs[-1]["content"] == "What is 1234 + 4321?"  # the family's environment prompt
        _, reward, terminated, _, _ = env.step("\\boxed{5555}")
        assert terminated and reward == 1.0
    finally:
        env.close()
    with pytest.raises(ConfigError, match=f"holds {name} tasks \\(math\\); this environment takes mc tasks"):
        toolgym.make("toolgym/ScienceQA-v0", dataset=f"{name}:{data}")


def test_a_family_declared_by_an_entry_point_is_found_by_a_fresh_process(tmp_path: Path) -> None:
    name = "tg_sums_ep_family"
    data = write_family(tmp_path, name)
    dist = tmp_path / "tg_sums_ep_family-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tg-sums-ep-family\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[toolgym.task_families]\n{name} = {name}:FAMILY\n")
    code = (
        "import json, sys\n"
        "from toolgym.envs.tasks import catalog\n"
        "loaded = catalog.load(sys.argv[1], style='generate')\n"
        "print(json.dumps({'kinds': catalog.kinds(), 'dataset': loaded.dataset, 'kind': loaded.kind,\n"
        "                  'truth': [t.ground_truth for t in loaded.tasks]}))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(SRC)])}
    proc = subprocess.run([sys.executable, "-c", code, f"{name}:{data}"], capture_output=True, text=True, env=env,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert name in out["kinds"] and "kattis" in out["kinds"]
    assert (out["dataset"], out["kind"], out["truth"]) == (name, "math", ["42", "5555", "0"])


def test_a_plugin_that_takes_a_builtin_name_is_named_and_the_builtin_stays(tmp_path: Path) -> None:
    (tmp_path / "tg_clash_family.py").write_text(
        "from toolgym.envs.tasks.family import TaskFamily, register_family\n"
        "FAMILY = register_family(TaskFamily(name='kattis', kind='code', read=lambda path, **kw: []))\n")
    dist = tmp_path / "tg_clash_family-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tg-clash-family\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[toolgym.task_families]\nkattis = tg_clash_family:FAMILY\n")
    builtin = FAMILIES["kattis"]
    sys.path.insert(0, str(tmp_path))
    importlib.invalidate_caches()
    try:
        FAMILIES.load_plugins(force=True)
        assert FAMILIES["kattis"] is builtin
        (error,) = [e for key, e in FAMILIES.errors.items() if key.startswith("kattis (tg_clash_family:FAMILY)")]
        assert "task family 'kattis' is already registered (by toolgym.envs.tasks.kattis)" in error
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("tg_clash_family", None)
        for key in [k for k in FAMILIES.errors if "tg_clash_family" in k]:
            FAMILIES.errors.pop(key)


def test_a_family_is_checked_when_it_registers(one_file_family) -> None:
    name, data = one_file_family
    with pytest.raises(ConfigError, match="kind must be one of mc, math, code, got 'essay'"):
        TaskFamily(name="essays", kind="essay", read=lambda path, **kw: [])
    with pytest.raises(ConfigError, match="reads nothing"):
        TaskFamily(name="empty", kind="math")
    with pytest.raises(ConfigError, match="asset 'gsm8k' is read by family 'math' already"):
        register_family(TaskFamily(name="my_gsm8k", kind="math", task=lambda row, i, **kw: None, assets=("gsm8k",)))
    catalog.split_source(f"{name}:FAMILY:{data}")
    with pytest.raises(ConfigError, match=f"task family '{name}' is already registered"):
        register_family(TaskFamily(name=name, kind="math", read=lambda path, **kw: []))
    assert "my_gsm8k" not in FAMILIES
    again = importlib.reload(sys.modules[name])  # its own module, imported again, replaces its family
    assert FAMILIES[name] is again.FAMILY


def test_an_unknown_or_broken_family_is_one_line() -> None:
    with pytest.raises(ConfigError, match=r"unknown task source 'aimee'; did you mean 'aime'\?") as exc:
        catalog.split_source("aimee:problems.jsonl")
    assert "\n" not in str(exc.value)
    with pytest.raises(ConfigError, match=r"the plug-in task family 'tg_no_such_module:FAMILY' failed to load: "
                                          r"ModuleNotFoundError.*is its package installed"):
        catalog.split_source("tg_no_such_module:FAMILY:problems.jsonl")
    with pytest.raises(ConfigError, match=r"the plug-in task family 'tg_no_such_module:FAMILY' failed to load"):
        toolgym.make("toolgym/MathTIR-v0", dataset="tg_no_such_module:FAMILY:problems.jsonl", sandbox=None)
    assert not catalog.is_source_string("math:problems.jsonl")  # a family of assets only: no local-file kind


def test_the_builtin_families_serve_every_source_kind_and_dataset() -> None:
    assert sorted(catalog.kinds()) == ["aime", "asset", "codecontests", "gpqa", "kattis", "livecodebench"]
    assert sorted(catalog.benchmark_datasets()) == sorted([
        "gsm8k", "math", "math500", "humaneval", "mbpp", "leetcode", "arc_challenge", "arc_easy", "mmlu", "sciq",
        "openbookqa"])
    kinds = {d: catalog.family_of_asset(d).kind for d in catalog.benchmark_datasets()}
    assert kinds["mmlu"] == "mc" and kinds["math500"] == "math" and kinds["leetcode"] == "code"
    assert catalog.dataset_of("gpqa:x.csv") == "gpqa_diamond" and catalog.dataset_of("asset:my_rows") is None


@pytest.mark.parametrize("old,new", [
    ("toolgym.envs.tasks.math_tir", "toolgym.envs.builtin.math_tir"),
    ("toolgym.envs.tasks.code_contest", "toolgym.envs.builtin.code_contest"),
    ("toolgym.envs.tasks.science_qa", "toolgym.envs.builtin.science_qa"),
    ("toolgym.envs.tasks.reasoning_gym", "toolgym.envs.builtin.reasoning_gym"),
    ("toolgym.envs.tasks.arith", "toolgym.envs.builtin.arith"),
    ("toolgym.envs.tasks.run_tests", "toolgym.envs.builtin.run_tests"),
    ("toolgym.envs.tasks._code", "toolgym.envs.builtin.code_records"),
    ("toolgym.envs.tasks._common", "toolgym.envs.builtin.datasets"),
    ("toolgym.envs.kattis", "toolgym.envs.tasks.kattis"),
])
def test_an_old_import_path_is_the_moved_module(old: str, new: str) -> None:
    moved = importlib.import_module(old)
    assert moved is importlib.import_module(new)
    assert moved.__spec__.name == new  # the module keeps its own spec (reload, pickling by name)
