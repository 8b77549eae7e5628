"""One multiple-choice reader: the environment's tasks and the suite's (generate and loglik prompts)
carry the same options and gold answer, and both mean lm-eval's "stem" category by MMLU STEM."""

from __future__ import annotations

import pytest

from toolgym.assets import load_records
from toolgym.envs.sources import TaskValidationError
from toolgym.envs.tasks.catalog import load
from toolgym.envs.tasks.multiple_choice import MMLU_STEM, mc_task
from toolgym.envs.tasks.science_qa import MMLU_STEM as ENV_STEM
from toolgym.envs.tasks.science_qa import mc_adapter


@pytest.mark.parametrize("dataset", ["arc_challenge", "arc_easy", "mmlu", "sciq", "openbookqa"])
def test_assets_read_alike(dataset):
    rows = load_records(dataset)[:300]
    for style in ("generate", "loglik"):
        for i, row in enumerate(rows):
            task, ev = mc_adapter(row, i), mc_task(row, i, style=style, dataset=dataset)
            assert (task.id, task.ground_truth) == (ev.id, ev.ground_truth)
            assert task.metadata["choices"] == ev.metadata["choices"] and task.metadata["labels"] == ev.metadata["labels"]
    assert len(load(f"asset:{dataset}", style="generate").tasks) == len(load_records(dataset))


def test_one_stem_list_and_bad_answers_refused():
    assert ENV_STEM == frozenset(MMLU_STEM) and "virology" not in ENV_STEM  # lm-eval puts it under "other"
    stem = load("asset:mmlu", style="generate", options={"subjects": "stem"}).tasks
    assert stem and {t.metadata["subject"] for t in stem} <= ENV_STEM
    bad = {"id": "q", "question": "Q?", "choices": ["a", "b"], "answer": 5}
    with pytest.raises(TaskValidationError, match="field 'answer' must be one of"):
        mc_task(bad, 0, style="generate")  # the suites' copy once took 5 as the gold index
    with pytest.raises(TaskValidationError, match="field 'answer' must be one of"):
        mc_adapter(bad, 0)
