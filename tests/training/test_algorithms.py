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


def test_infrastructure_failures_neither_train_nor_count_in_baselines_nor_become_peers(tmp_path):
    from toolgym.training.algorithms.distillation.step import build_mopd_batch

    tr = Trainer(load_config(tiny_config(tmp_path / "run", sft__enabled=False)), console=False)
    ctx = tr.build()
    groups = _groups(tr, [[1.0, 0.0, 0.0], [1.0, 0.0, 1.0]])
    groups[0][1].finish_reason = "error"  # e.g. the sandbox died under the episode: reward 0 says nothing
    groups[1][1].finish_reason = "timeout"
    batch, m = tr.objective.prepare(ctx, groups)
    assert m["infra_failures"] == 2 and m["reward_nonfinite"] == 0
    assert batch.keep.tolist() == [True, False, True, True, False, True]
    # group 0's baseline is over rewards (1, 0), not (1, 0, 0): the infra failure is not a failure
    a = batch.advantages.tolist()
    assert a[0] > 0 and a[2] < 0 and abs(a[0] + a[2]) < 1e-6 and a[1] == 0.0
    assert a[3] == a[5] == 0.0  # group 1: (1, 1) left, no signal
    # MOPD: an infra failure is never anyone's peer (group 0 row 0 may only see row 2 as its failure)
    trajs = [t for g in groups for t in g]
    scores = [float("nan") if t.finish_reason in ("error", "timeout") else t.reward for t in trajs]
    for _ in range(5):
        mb = build_mopd_batch(trajs, tr.tokenizer, rewards=scores, seed=_, mode="contrastive",
                              messages=[[{"role": "user", "content": f"What is {t.group_id} + 1?"}] for t in trajs])
        assert mb.contexts[0].selection.failures == [2] and 1 not in mb.contexts[2].selection.successes
        assert all(4 not in c.selection.successes + c.selection.failures for c in mb.contexts)
