"""``toolgym.envs.scoring`` is the one place callers import scoring from; the modules' old paths still import
(as the moved modules themselves), and importing the package loads none of its parts."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from toolgym.envs import scoring


@pytest.mark.parametrize("old,new", [
    ("toolgym.envs.offloop", "toolgym.envs.scoring.offloop"),
    ("toolgym.envs.scorer_guard", "toolgym.envs.scoring.guard"),
    ("toolgym.envs.scorer_worker", "toolgym.envs.scoring.scorer_worker"),
    ("toolgym.envs.reward_pool", "toolgym.envs.scoring.reward_pool"),
])
def test_an_old_scoring_path_is_the_moved_module(old: str, new: str) -> None:
    moved = importlib.import_module(old)
    assert moved is importlib.import_module(new)
    assert moved.__spec__.name == new


def test_every_public_name_comes_from_the_package_and_is_its_module_s_own() -> None:
    for name in scoring.__all__:
        obj = getattr(scoring, name)
        assert obj.__module__.startswith("toolgym.envs.scoring."), name
        assert getattr(importlib.import_module(obj.__module__), name) is obj
    # the real child, started from the new path, runs a function named by it
    assert scoring.worker().call("toolgym.envs.scoring.scorer_worker:in_worker", [], deadline_s=60) is True
    assert not scoring.in_worker()
    with pytest.raises(AttributeError, match="has no attribute 'score'"):
        scoring.score  # noqa: B018


def test_importing_the_package_loads_no_part_of_it() -> None:
    code = ("import sys, toolgym.envs.scoring\n"
            "print(sorted(m for m in sys.modules if m.startswith('toolgym.envs.scoring.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
