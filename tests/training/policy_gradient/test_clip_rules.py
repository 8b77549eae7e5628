"""The clip's rules are written once (``config_schema.clip_problem``): a config's ``loss`` section and a
``ClipConfig`` built by hand refuse the same settings, each naming the field and what is allowed."""

from __future__ import annotations

import math

import pytest

from toolgym.errors import ConfigError
from toolgym.training.config import load_config
from toolgym.training.policy_gradient.clip import ClipConfig

MODEL = {"model": {"name_or_path": "demo"}}

# (clip_mode, the bad setting, the field named, what the message says is allowed; None: not a number to the
# config's type check, which says so before any rule; ClipConfig's rule refuses it as "a finite number")
BAD = [
    ("adaptive", {"eps_low": -0.1}, "eps_low", "a finite number >= 0"),
    ("adaptive", {"eps_high": math.inf}, "eps_high", None),  # the config's type check refuses it first
    ("adaptive", {"power": -1.0}, "power", "a finite number >= 0"),
    ("adaptive", {"dual": 0.0}, "dual", "or a number > 0 with {mode} 'adaptive'"),
    ("adaptive", {"dual": math.nan}, "dual", None),
    ("fixed", {"eps_low": 1.5}, "eps_low", "a number in [0, 1] with {mode} 'fixed'"),
    ("fixed", {"dual": 0.5}, "dual", "or a ratio > 1 with {mode} 'fixed'"),
]


@pytest.mark.parametrize(("mode", "setting", "name", "allowed"), BAD)
def test_a_config_and_a_clip_config_refuse_the_same_setting(mode: str, setting: dict, name: str,
                                                            allowed: str | None) -> None:
    with pytest.raises(ConfigError) as by_config:
        load_config({**MODEL, "loss": {"clip_mode": mode, **setting}})
    assert str(by_config.value).startswith(f"loss.{name}: must be ")
    assert allowed is None or allowed.format(mode="clip_mode") in str(by_config.value)

    fields = {"mode": mode, "eps_low": 0.2, "eps_high": 0.2, "power": 0.0 if mode == "fixed" else 0.5, "dual": None}
    with pytest.raises(ValueError) as by_hand:
        ClipConfig(**{**fields, **setting})
    assert str(by_hand.value).startswith(f"ClipConfig.{name} must be ")
    assert "a finite number" in str(by_hand.value) if allowed is None else allowed.format(mode="mode") in str(by_hand.value)


@pytest.mark.parametrize("mode", ["adaptive", "fixed"])
def test_the_edges_of_each_rule_are_allowed_by_both(mode: str) -> None:
    edge = {"eps_low": 1.0 if mode == "fixed" else 0.0, "eps_high": 0.0, "power": 0.0,
            "dual": 1.0001 if mode == "fixed" else 1e-9}
    cfg = load_config({**MODEL, "loss": {"clip_mode": mode, **edge}})
    assert ClipConfig.from_loss(cfg.loss) == ClipConfig(mode=mode, **edge)
