"""One CodeContests pipeline: the environment's task and the suite's (generate prompt) carry the same
tests and the record's own time limit; only the prompt differs."""

from __future__ import annotations

import json

import pytest

from toolgym.envs.sources import TaskValidationError
from toolgym.envs.tasks import catalog
from toolgym.envs.tasks._code import code_adapter
from toolgym.envs.tasks.codecontests import cc_task


def _row(**over) -> dict:
    row = {"name": "cc1", "description": "Print the sum.", "time_limit": {"seconds": 1, "nanos": 500000000},
           "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
           "private_tests": {"input": ["5 5\n"], "output": ["10\n"]},
           "generated_tests": {"input": ["0 0\n"], "output": ["0\n"]}}
    return {**row, **over}


def test_env_and_suite_get_the_same_tests():
    task, ev = code_adapter(_row(), 0), cc_task(_row(), style="generate")
    assert task.id == ev.id == "cc1"
    assert task.ground_truth == ev.ground_truth
    assert ev.ground_truth["hidden"] == [
        {"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10\n"}, {"input": "0 0\n", "output": "0\n"}]
    assert task.ground_truth["public"] == [{"input": "1 2\n", "output": "3\n"}]
    assert ev.ground_truth["judge"] == {"time_limit_s": 1.5}
    assert "judge" not in cc_task(_row(time_limit=None)).ground_truth  # the suites' default applies then
    assert task.prompt != ev.prompt and "Python 3 program" in ev.prompt[0]["content"]


def test_source_string_gives_the_same_tasks_in_both_styles(tmp_path):
    f = tmp_path / "cc.jsonl"
    f.write_text(json.dumps(_row()) + "\n" + json.dumps(_row(name="cc2")) + "\n")
    env, gen = (catalog.load(f"codecontests:{f}", style=s) for s in ("env", "generate"))
    assert env.kind == gen.kind == "code" and env.dataset == "codecontests"
    assert [(t.id, t.ground_truth) for t in env.tasks] == [(t.id, t.ground_truth) for t in gen.tasks]


def test_a_group_with_unpaired_outputs_is_refused():
    bad = _row(private_tests={"input": ["1\n", "2\n"], "output": ["1\n"]})
    with pytest.raises(TaskValidationError, match="cc1: field 'private_tests': 2 inputs but 1 outputs"):
        cc_task(bad, where="CodeContests cc1: ")
    with pytest.raises(TaskValidationError, match="2 inputs but 1 outputs"):
        code_adapter(bad, 0)
