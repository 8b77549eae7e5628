"""One CodeContests parser: the environment and the suite get the same tests from the same record."""

from __future__ import annotations

import pytest

from toolgym.envs.sources import TaskValidationError
from toolgym.envs.tasks._code import code_adapter
from toolgym.suites.loaders.codecontests import codecontests_task


def _row(**over) -> dict:
    row = {"name": "cc1", "description": "Print the sum.", "time_limit": {"seconds": 1, "nanos": 500000000},
           "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
           "private_tests": {"input": ["5 5\n"], "output": ["10\n"]},
           "generated_tests": {"input": ["0 0\n"], "output": ["0\n"]}}
    return {**row, **over}


def test_env_and_suite_get_the_same_tests():
    task, ev = code_adapter(_row(), 0), codecontests_task(_row())
    assert task.id == ev.id == "cc1"
    assert task.ground_truth["hidden"] == [{"input": t.input, "output": t.output} for t in ev.tests] == [
        {"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10\n"}, {"input": "0 0\n", "output": "0\n"}]
    assert task.ground_truth["public"] == [{"input": "1 2\n", "output": "3\n"}]
    assert ev.time_limit_s == 1.5 and codecontests_task(_row(time_limit=None)).time_limit_s == 10.0


def test_a_group_with_unpaired_outputs_is_refused_on_both_paths():
    bad = _row(private_tests={"input": ["1\n", "2\n"], "output": ["1\n"]})
    with pytest.raises(TaskValidationError, match="CodeContests cc1: field 'private_tests': 2 inputs but 1 outputs"):
        codecontests_task(bad)  # the suites' copy once dropped the unpaired input silently
    with pytest.raises(TaskValidationError, match="2 inputs but 1 outputs"):
        code_adapter(bad, 0)
