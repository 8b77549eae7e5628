"""toolgym/ScienceQA-v0: multiple choice from the asset cache and GPQA-format CSVs."""

from __future__ import annotations

import csv

import pytest

import toolgym
from toolgym.envs.checker import check_env
from toolgym.envs.sources import TaskValidationError
from toolgym.envs.tasks.science_qa import MMLU_STEM


@pytest.mark.parametrize("dataset", ["arc_challenge", "sciq", "openbookqa", "arc_easy"])
def test_reference_letter_scores_in_several_formats(dataset):
    env = toolgym.make("toolgym/ScienceQA-v0", dataset=dataset, sandbox=None)
    obs, info = env.reset(seed=2)
    task = env.unwrapped.task
    letter = task.ground_truth
    assert f"\n{letter}. " in obs[-1]["content"]
    wrong = next(lab for lab in task.metadata["labels"] if lab != letter)
    for reply, reward in [(f"\\boxed{{{letter}}}", 1.0), (f"The answer is ({letter}).", 1.0),
                          (f"Answer: {letter}", 1.0), (f"\\boxed{{{wrong}}}", 0.0), ("I don't know", 0.0)]:
        env.reset(seed=2)
        *_, r, term, _, _ = env.step(reply)
        assert term and r == reward, (reply, r)


def test_mmlu_keeps_stem_subjects():
    env = toolgym.make("toolgym/ScienceQA-v0", dataset="mmlu", sandbox=None)
    subjects = {t.metadata["subject"] for t in env.unwrapped.source}
    assert subjects and subjects <= MMLU_STEM
    one = toolgym.make("toolgym/ScienceQA-v0", dataset="mmlu", subjects="astronomy", sandbox=None)
    assert {t.metadata["subject"] for t in one.unwrapped.source} == {"astronomy"}


def test_option_text_answer_counts():
    env = toolgym.make("toolgym/ScienceQA-v0", sandbox=None)
    env.reset(seed=1)
    t = env.unwrapped.task
    text = t.metadata["choices"][t.metadata["labels"].index(t.ground_truth)]
    *_, r, _, _, _ = env.step(f"The answer is: {text}")
    assert r == 1.0


def write_gpqa(path, rows):
    fields = ["Record ID", "Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2",
              "Incorrect Answer 3", "High-level domain"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow(r)


def test_gpqa_format_csv(tmp_path):
    rows = [{"Record ID": f"r{i}", "Question": f"Q{i}?", "Correct Answer": f"right{i}", "Incorrect Answer 1": "w1",
             "Incorrect Answer 2": "w2", "Incorrect Answer 3": "w3", "High-level domain": "Physics"} for i in range(8)]
    p = tmp_path / "gpqa.csv"
    write_gpqa(p, rows)
    env = toolgym.make("toolgym/ScienceQA-v0", dataset=str(p), sandbox=None)
    positions = set()
    for i in range(8):
        obs, _ = env.reset(options={"index": i})
        t = env.unwrapped.task
        positions.add(t.ground_truth)
        assert f"{t.ground_truth}. right" in obs[-1]["content"]
        *_, r, _, _, _ = env.step(f"\\boxed{{{t.ground_truth}}}")
        assert r == 1.0
    assert len(positions) > 1  # the correct option is shuffled, not always first
    rows[1]["Incorrect Answer 3"] = ""
    bad = tmp_path / "bad.csv"
    write_gpqa(bad, rows[:2])
    with pytest.raises(TaskValidationError, match="row 1: field 'Incorrect Answer 3' is empty"):
        toolgym.make("toolgym/ScienceQA-v0", dataset=str(bad), sandbox=None)


def test_bad_mc_record():
    with pytest.raises(TaskValidationError, match="row 0: field 'answer' must be one of"):
        toolgym.make("toolgym/ScienceQA-v0", dataset=[{"question": "q", "choices": ["a", "b"], "answer": "C"}], sandbox=None)


def test_optional_python_tool(local_sandbox):
    env = toolgym.make("toolgym/ScienceQA-v0", tools=True, sandbox=local_sandbox)
    obs, info = env.reset(seed=0)
    assert [t["function"]["name"] for t in info["tools"]] == ["python"]
    obs, r, term, *_ = env.step("```python\nprint(6.674e-11 * 5.97e24 / 6.371e6**2)\n```")
    assert not term and obs[0]["content"].startswith("9.8")


def test_checker_passes():
    assert [c.name for c in check_env(lambda: toolgym.make("toolgym/ScienceQA-v0")) if not c.ok] == []
