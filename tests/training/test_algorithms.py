"""An algorithm is one registry entry: registered with its defaults, options and objective, it trains
through the Trainer, which hands the objective a StepContext (never itself) and calls its optional hooks."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from toolgym.training.algorithms import ALGORITHMS, Objective, StepContext, register_algorithm
from toolgym.training.algorithms.policy_gradient import PolicyGradient
from toolgym.training.config import load_config
from toolgym.training.trainer import Trainer

from .test_trainer import _groups
from .trainer_util import tiny_config


@dataclass
class ScaledOptions:
    scale: float = 2.0


class ScaledPolicyGradient(Objective):
    """The policy-gradient loss times ``options.scale``, recording what the trainer hands it."""

    def __init__(self, cfg) -> None:
        self.inner = PolicyGradient(cfg)
        self.scale = cfg.options.scale
        self.seen: list[str] = []
        self.updates = 0

    def prepare(self, ctx, groups):
        assert isinstance(ctx, StepContext) and not isinstance(ctx, Trainer)
        self.seen.append("prepare")
        return self.inner.prepare(ctx, groups)

    def loss(self, ctx, batch, rows, token_count, seq_count):
        self.seen.append("loss")
        loss, m = self.inner.loss(ctx, batch, rows, token_count, seq_count)
        return loss * self.scale, m

    def after_update(self, ctx):
        self.seen.append("after_update")
        self.updates += 1
        return {"scaled/grad_norm_seen": float(sum(ctx.grad_norms))}

    def state_dict(self):
        return {"updates": self.updates}

    def load_state_dict(self, state):
        self.updates = state["updates"]


def test_a_registered_algorithm_trains_through_the_trainer(tmp_path):
    register_algorithm("scaled_pg", {"loss": {"ratio": "token", "clip_mode": "none", "agg": "token-mean"},
                                     "mini_batches": 1}, ScaledOptions, ScaledPolicyGradient)
    try:
        data = tiny_config(tmp_path / "run", sft__enabled=False, algorithm="scaled_pg", options={"scale": 3.0})
        data.pop("mini_batches")  # the algorithm's default applies
        tr = Trainer(load_config(data), console=False)
        ctx = tr.build()
        obj = tr.objective
        assert isinstance(obj, ScaledPolicyGradient) and obj.scale == 3.0 and tr.cfg.mini_batches == 1
        assert ctx.module is tr.module and ctx.temperature == tr.cfg.rollout.temperature
        batch, _ = obj.prepare(ctx, _groups(tr, [[1.0, 0.0], [0.0, 1.0]]))
        scaled, _ = obj.loss(ctx, batch, [0, 1], 8.0, 2.0)
        plain, _ = PolicyGradient(tr.cfg).loss(ctx, batch, [0, 1], 8.0, 2.0)
        torch.testing.assert_close(scaled, 3.0 * plain)
        out = tr.update(batch, obj)
        assert out["optimizer_steps"] == 1 and len(ctx.grad_norms) == 1 and ctx.grad_norms[0] > 0
        assert obj.after_update(ctx)["scaled/grad_norm_seen"] == ctx.grad_norms[0]
        assert obj.seen[:2] == ["prepare", "loss"] and obj.seen[-1] == "after_update"
    finally:
        ALGORITHMS.pop("scaled_pg", None)


def test_the_base_objective_declares_optional_hooks_as_no_ops():
    class Minimal(Objective):
        pass

    m = Minimal()
    assert m.after_update(None) == {} and m.state_dict() is None and m.load_state_dict({}) is None
