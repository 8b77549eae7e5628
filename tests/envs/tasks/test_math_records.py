"""One math-record reader: the environment's tasks and the suite's (generate prompt) carry the same
question, answer and id; the generate prompt adds only the \\boxed{} instruction."""

from __future__ import annotations

import json

import pytest

from toolgym.assets import load_records
from toolgym.envs.sources import TaskValidationError
from toolgym.envs.tasks.catalog import load
from toolgym.envs.tasks.math_records import INSTRUCTION
from toolgym.envs.tasks.math_tir import math_adapter


@pytest.mark.parametrize("dataset", ["gsm8k", "math500"])
def test_assets_read_alike(dataset):
    rows = load_records(dataset)[:200]
    for i, (row, ev) in enumerate(zip(rows, load(f"asset:{dataset}", style="generate").tasks, strict=False)):
        task = math_adapter(row, i)
        assert (task.id, task.ground_truth) == (ev.id, ev.ground_truth)
        assert ev.prompt[0]["content"] == f"{task.prompt[0]['content'].strip()}\n\n{INSTRUCTION}"


def test_an_aime_file_reads_alike(tmp_path):
    rows = [{"ID": "2024-I-1", "Problem": "Find x.", "Answer": "033", "Year": 2024},
            {"problem_id": 7, "problem": "Find y.", "answer": 204}]
    f = tmp_path / "aime.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    envs = load(f"aime:{f}", style="env").tasks
    assert [(t.id, t.prompt[0]["content"], t.ground_truth) for t in envs] == [
        ("2024-I-1", "Find x.", "33"), ("7", "Find y.", "204")]
    assert [(t.id, t.ground_truth) for t in load(f"aime:{f}", style="generate").tasks] == [("2024-I-1", "33"), ("7", "204")]
    assert envs[0].metadata == {"year": 2024}
    with pytest.raises(TaskValidationError, match=r"aime\.jsonl:1: field 'answer' is missing"):
        f.write_text(json.dumps({"problem": "no answer"}) + "\n")
        load(f"aime:{f}")
