"""One GPQA parser: the environment and the suite show a question's options in the same order."""

from __future__ import annotations

import csv

import pytest

import toolgym
from toolgym.envs.sources import TaskValidationError
from toolgym.envs.tasks.gpqa import load_csv as load_gpqa_records

COLS = ["Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3",
        "Record ID", "High-level domain", "Subdomain"]


def _write(path, rows):
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(COLS)
        w.writerows(rows)
    return path


def test_env_and_suite_agree_on_options_and_gold(tmp_path):
    p = _write(tmp_path / "gpqa.csv", [[f"Q{i}?", f"right{i}", f"a{i}", f"b{i}", f"c{i}", f"rec{i}", "Physics", "Optics"]
                                       for i in range(10)])
    recs = load_gpqa_records(p)
    env = toolgym.make("toolgym/ScienceQA-v0", dataset=str(p), sandbox=None)
    for i, rec in enumerate(recs):
        env.reset(options={"index": i})
        task = env.unwrapped.task
        assert (task.id, task.metadata["choices"], task.ground_truth) == (rec["id"], rec["choices"], rec["answer"])
        assert rec["choices"][rec["labels"].index(rec["answer"])] == f"right{i}"
        assert task.metadata["subject"] == rec["subject"] == "Optics"
    assert len({r["answer"] for r in recs}) > 1  # shuffled
    assert [r["choices"] for r in load_gpqa_records(p, seed=1)] != [r["choices"] for r in recs]  # by the run's seed


def test_an_empty_option_is_refused_by_the_suite_too(tmp_path):
    p = _write(tmp_path / "bad.csv", [["Q?", "right", "a", "b", "", "rec0", "Physics", "Optics"]])
    with pytest.raises(TaskValidationError, match=r"bad\.csv: row 0: field 'Incorrect Answer 3' is empty"):
        load_gpqa_records(p)
