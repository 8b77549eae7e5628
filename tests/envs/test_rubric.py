"""Rubric: weighted plain reward functions, each reported."""

from __future__ import annotations

import asyncio

import pytest

from toolgym.envs.rubric import Rubric, format_reward
from toolgym.errors import ConfigError


def correct(answer, task):
    return float(answer == task)


async def slow_half(completion):
    await asyncio.sleep(0)
    return 0.5


def broken(**kwargs):
    raise RuntimeError("oops")


def test_weighted_total_and_components():
    r = Rubric([correct, (format_reward, 0.2), (slow_half, 2.0)])
    res = asyncio.run(r.ascore(completion="c", answer="4", task="4", messages=[], state={}))
    assert res.components == {"correct": 1.0, "format_reward": 1.0, "slow_half": 0.5}
    assert res.total == pytest.approx(1.0 + 0.2 + 1.0)
    assert r.range == (0.0, 3.2)


def test_failing_component_scores_zero_and_is_reported():
    r = Rubric([correct, broken])
    res = r.score(completion="", answer=None, task="x")
    assert res.components["broken"] == 0.0
    assert "oops" in res.errors["broken"]
    assert res.total == 0.0


def test_weights_argument_and_negative_range():
    r = Rubric([correct, format_reward], weights=[1.0, -0.5])
    assert r.range == (-0.5, 1.0)
    assert r.score(answer=None, task="x", completion="").total == 0.0


def test_empty_or_noncallable():
    with pytest.raises(ConfigError):
        Rubric([])
    with pytest.raises(ConfigError):
        Rubric([42])
