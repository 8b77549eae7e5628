"""toolgym/ReasoningGym-v0: any reasoning-gym dataset by name, seeded, scored by its own scorer."""

from __future__ import annotations

import pytest

import toolgym
from toolgym.envs.checker import check_env
from toolgym.errors import ConfigError


@pytest.mark.parametrize("name", ["basic_arithmetic", "chain_sum", "letter_counting", "spell_backward"])
def test_reference_answer_scores_one(name):
    env = toolgym.make("toolgym/ReasoningGym-v0", dataset=name, sandbox=None)
    env.reset(seed=9)
    gt = env.unwrapped.task.ground_truth
    *_, r, term, _, info = env.step(f"Thinking done.\n<answer>{gt}</answer>")
    assert term and r == 1.0, (name, gt, info)
    env.reset(seed=9)
    *_, r, _, _, _ = env.step("<answer>definitely wrong 🙃</answer>")
    assert r < 1.0


def test_seeded_unbounded_and_config():
    a = toolgym.make("toolgym/ReasoningGym-v0", dataset="basic_arithmetic", sandbox=None, seed=1)
    b = toolgym.make("toolgym/ReasoningGym-v0", dataset="basic_arithmetic", sandbox=None, seed=1)
    assert a.reset(seed=3) == b.reset(seed=3)
    big = a.unwrapped.source.get(10**9)
    assert big.prompt[0]["content"]
    c = toolgym.make("toolgym/ReasoningGym-v0", dataset="basic_arithmetic", sandbox=None,
                     config={"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1})
    c.reset(seed=0)
    assert c.unwrapped.task.metadata["rg_config"]["max_terms"] == 2


def test_list_valued_config_and_bad_config():
    env = toolgym.make("toolgym/ReasoningGym-v0", dataset="basic_arithmetic", sandbox=None,
                       config={"operators": ["+"], "min_terms": 2, "max_terms": 2})
    env.reset(seed=0)
    assert "-" not in env.unwrapped.task.metadata.get("rg_config", {}).get("operators", [])
    *_, r, _, _, _ = env.step(f"<answer>{env.unwrapped.task.ground_truth}</answer>")
    assert r == 1.0
    with pytest.raises(ConfigError, match="bad config"):
        toolgym.make("toolgym/ReasoningGym-v0", dataset="basic_arithmetic", sandbox=None, config={"no_such_knob": 1})


def test_unknown_dataset_suggests():
    with pytest.raises(ConfigError, match="basic_arithmetic"):
        toolgym.make("toolgym/ReasoningGym-v0", dataset="basic_arithmetik", sandbox=None)


def test_scorer_exception_scores_zero():
    env = toolgym.make("toolgym/ReasoningGym-v0", dataset="basic_arithmetic", sandbox=None)
    env.reset(seed=0)
    env.unwrapped.task.metadata["rg_index"] = "not an index"
    *_, r, term, _, _ = env.step("<answer>1</answer>")
    assert term and r == 0.0


def test_checker_passes():
    assert [c.name for c in check_env(lambda: toolgym.make("toolgym/ReasoningGym-v0")) if not c.ok] == []
