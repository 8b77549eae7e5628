"""One math-record reader: the environment and the suite read the same question, answer and id."""

from __future__ import annotations

import json

import pytest

from toolgym.assets import load_records
from toolgym.envs.sources import TaskValidationError
from toolgym.envs.tasks.math_tir import math_adapter
from toolgym.suites.loaders.aime import load_aime_records
from toolgym.suites.math import math_tasks


@pytest.mark.parametrize("dataset", ["gsm8k", "math500"])
def test_assets_read_alike(dataset):
    rows = load_records(dataset)[:200]
    for i, (row, ev) in enumerate(zip(rows, math_tasks(dataset, rows), strict=True)):
        task = math_adapter(row, i)
        assert (task.id, task.ground_truth) == (ev.id, ev.answer)
        assert ev.prompt.startswith(task.prompt[0]["content"].strip())


def test_an_aime_file_reads_alike(tmp_path):
    rows = [{"ID": "2024-I-1", "Problem": "Find x.", "Answer": "033", "Year": 2024},
            {"problem_id": 7, "problem": "Find y.", "answer": 204}]
    f = tmp_path / "aime.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recs = load_aime_records(f)
    envs = [math_adapter(r, i) for i, r in enumerate(rows)]
    assert [(r["id"], r["question"], r["answer"]) for r in recs] == [("2024-I-1", "Find x.", "33"), ("7", "Find y.", "204")]
    assert [(t.id, t.prompt[0]["content"], t.ground_truth) for t in envs] == [
        (r["id"], r["question"], r["answer"]) for r in recs]
    assert envs[0].metadata == {"year": 2024}
    with pytest.raises(TaskValidationError, match=r"aime\.jsonl record 0: field 'answer' is missing"):
        f.write_text(json.dumps({"problem": "no answer"}) + "\n")
        load_aime_records(f)
