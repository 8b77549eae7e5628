"""One multiple-choice reader: the environment and the suite read the same options and gold answer,
and both mean lm-eval's "stem" category by MMLU STEM."""

from __future__ import annotations

import pytest

from toolgym.assets import load_records
from toolgym.envs.sources import TaskValidationError
from toolgym.envs.tasks.science_qa import MMLU_STEM as ENV_STEM
from toolgym.envs.tasks.science_qa import mc_adapter
from toolgym.suites.science import MMLU_STEM, mc_task


@pytest.mark.parametrize("dataset", ["arc_challenge", "arc_easy", "mmlu", "sciq", "openbookqa"])
def test_assets_read_alike(dataset):
    for i, row in enumerate(load_records(dataset)[:300]):
        task, ev = mc_adapter(row, i), mc_task(dataset, row)
        assert (task.id, task.metadata["choices"], task.metadata["labels"]) == (ev.id, ev.options, ev.labels)
        assert task.ground_truth == ev.labels[ev.gold]


def test_one_stem_list_and_bad_answers_refused_on_both_paths():
    assert ENV_STEM == frozenset(MMLU_STEM) and "virology" not in ENV_STEM  # lm-eval puts it under "other"
    bad = {"id": "q", "question": "Q?", "choices": ["a", "b"], "answer": 5}
    with pytest.raises(TaskValidationError, match="field 'answer' must be one of"):
        mc_task("arc_easy", bad)  # the suites' copy once took 5 as the gold index
    with pytest.raises(TaskValidationError, match="field 'answer' must be one of"):
        mc_adapter(bad, 0)
