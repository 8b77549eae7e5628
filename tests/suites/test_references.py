"""Published reference numbers in bench reports: found by any spelling of the model's name, shown beside the
run's score with their source and protocol, and never attached to a different metric or an unknown model."""

from __future__ import annotations

import pytest

from toolgym.suites.references import model_key, reference_for
from toolgym.suites.registry import suite_from_dict
from toolgym.suites.report import build_report, markdown
from toolgym.suites.runner import BenchConfig

SUITE = suite_from_dict({"name": "code-mini", "entries": [
    {"name": "humaneval", "env": "toolgym/CodeContest-v0", "source": "asset:humaneval", "metric": "pass@1"},
    {"name": "mbpp", "env": "toolgym/CodeContest-v0", "source": "asset:mbpp", "metric": "pass@1"},
    {"name": "leetcode", "env": "toolgym/CodeContest-v0", "source": "asset:leetcode", "metric": "pass@1"},
]})
RECORDS = [
    {"entry": "humaneval", "id": "h1", "correct": [True]}, {"entry": "humaneval", "id": "h2", "correct": [False]},
    {"entry": "mbpp", "id": "m1", "correct": [True]}, {"entry": "leetcode", "id": "l1", "correct": [False]},
]
TASKS = {"humaneval": ["h1", "h2"], "mbpp": ["m1"], "leetcode": ["l1"]}


@pytest.mark.parametrize("name", ["qwen2.5-coder-0.5b-instruct", "Qwen/Qwen2.5-Coder-0.5B-Instruct",
                                  "/root/.cache/toolgym/qwen2.5-coder-0.5b-instruct/"])
def test_every_spelling_of_a_model_finds_its_published_figures(name: str) -> None:
    assert model_key(name) == "qwen2.5-coder-0.5b-instruct"
    ref = reference_for(name, "humaneval", "pass@1")
    assert ref is not None and ref.value == 61.6 and "2409.12186" in ref.source and "EvalPlus" in ref.protocol


def test_no_reference_for_another_metric_an_unlisted_entry_or_model() -> None:
    assert reference_for("qwen2.5-coder-0.5b-instruct", "humaneval", "pass@10") is None
    assert reference_for("qwen2.5-coder-0.5b-instruct", "leetcode", "pass@1") is None
    assert reference_for("smollm2-135m-instruct", "humaneval", "pass@1") is None


def test_report_has_a_published_column_with_numbered_sources() -> None:
    cfg = BenchConfig(suite="code-mini", model="Qwen/Qwen2.5-Coder-0.5B-Instruct", completions="x.jsonl")
    rep = build_report(cfg, SUITE, RECORDS, TASKS, {})
    assert rep["entries"]["humaneval"]["reference"]["value"] == 61.6
    assert rep["entries"]["mbpp"]["reference"]["value"] == 52.4
    assert "reference" not in rep["entries"]["leetcode"]
    md = markdown(rep)
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[1:-1]] for line in md.splitlines()
            if line.startswith("| ") and not line.startswith("| entry")}
    header = next(line for line in md.splitlines() if line.startswith("| entry"))
    col = [c.strip() for c in header.split("|")[1:-1]].index("published %")
    assert rows["humaneval"][3] == "50.0 [0.0, 100.0]" and rows["humaneval"][col] == "61.6 [1]"
    assert rows["mbpp"][col] == "52.4 [2]" and rows["leetcode"][col] == "–"
    assert "[1] Qwen2.5-Coder Technical Report" in md and "EvalPlus MBPP" in md.split("[2]")[-1]


def test_an_unknown_model_gets_the_column_but_no_sources() -> None:
    cfg = BenchConfig(suite="code-mini", model="smollm2-135m-instruct", completions="x.jsonl")
    md = markdown(build_report(cfg, SUITE, RECORDS, TASKS, {}))
    assert "published %" in md and "[1]" not in md and "Published figures" not in md
