"""No wasted passes: an exactly on-policy mini-batch takes its old log-probs from the update's own forward
(detached) instead of an extra no-grad pass; the loss and gradient equal the two-pass path, the pass runs only
for the rows whose ratio needs the pre-update weights, and AdamW runs its multi-tensor path."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from toolgym.agents.trajectory import Trajectory
from toolgym.training.algorithms.policy_gradient import PolicyGradient
from toolgym.training.config import load_config
from toolgym.training.trainer import Trainer, adamw_path

from .trainer_util import tiny_config

# share_prompt off: the forwards counted here are the model's own, one per micro-batch (test_shared_prompt.py
# counts the shared path's)
MODEL = {"name_or_path": "demo", "share_prompt": "off",
         "model_kwargs": {"layers": 1, "hidden": 32, "heads": 2, "intermediate": 64, "max_positions": 512,
                          "vocab_size": 300}}


def _trainer(tmp_path: Path, algorithm: str, mini_batches: int, **over) -> Trainer:
    data = tiny_config(tmp_path, **{"sft__enabled": False, "model": MODEL, "algorithm": algorithm,
                                    "mini_batches": mini_batches, "optimizer__weight_decay": 0.0, **over})
    data["rollout"]["prompts_per_step"] = 2
    data["rollout"]["group_size"] = 3
    tr = Trainer(load_config(data), console=False)
    tr.build()
    return tr


def _groups(tr: Trainer) -> list[list[Trajectory]]:
    g = torch.Generator().manual_seed(1)
    out = []
    for gi, lengths in enumerate([[4, 9, 6], [7, 3, 8]]):
        msgs = [{"role": "user", "content": f"What is {gi} + 2?"}]
        prompt = tr.template.prompt_ids(msgs)
        out.append([Trajectory(task_id=f"t{gi}", group_id=f"g{gi}", prompt_ids=prompt,
                               response_ids=torch.randint(3, 300, (n,), generator=g).tolist(),
                               loss_mask=[int(j % 3 != 1) for j in range(n)], behavior_logprobs=[-1.0] * n,
                               reward=float((gi + k) % 2)) for k, n in enumerate(lengths)])
    return out


def _update(tr: Trainer, reuse: bool) -> tuple[dict, list[dict[str, torch.Tensor]], list[tuple[bool, int]], object]:
    """One update: metrics, each optimizer step's gradient, every forward of the module (grad on?, rows)."""
    obj = PolicyGradient(tr.cfg, reuse_update_logp=reuse)
    tr.objective = obj
    forwards: list[tuple[bool, int]] = []
    hook = tr.module.register_forward_pre_hook(
        lambda _m, _a, kw: forwards.append((torch.is_grad_enabled(), int(kw["input_ids"].shape[0]))),
        with_kwargs=True)
    grads: list[dict[str, torch.Tensor]] = []
    tr.optimizer.register_step_pre_hook(lambda *_: grads.append(
        {n: p.grad.clone() for n, p in tr.module.named_parameters() if p.grad is not None}))
    try:
        batch, _ = obj.prepare(tr.ctx, _groups(tr))
        out = tr.update(batch, obj)
    finally:
        hook.remove()
    return out, grads, forwards, batch


@pytest.mark.parametrize("algorithm", ["ctpo", "grpo"])
@pytest.mark.parametrize("mini_batches", [1, 2])
def test_own_forward_gives_the_two_pass_loss_and_gradient_without_the_extra_pass(tmp_path, algorithm, mini_batches):
    ref, ref_grads, ref_fwd, _ = _update(_trainer(tmp_path / "two", algorithm, mini_batches), reuse=False)
    out, grads, fwd, batch = _update(_trainer(tmp_path / "one", algorithm, mini_batches), reuse=True)
    # the two-pass path: a no-grad forward of all 6 rows (in micro-batches of a mini-batch's rows), then one
    # forward with grad per mini-batch
    rows = 6 // mini_batches
    assert ref_fwd == [(False, rows)] * mini_batches + [(True, rows)] * mini_batches
    # reused: the no-grad pass only for the off-policy second mini-batch's rows, none at all with one mini-batch
    assert fwd == [(False, rows)] * (mini_batches - 1) + [(True, rows)] * mini_batches
    assert batch.own_old_rows == frozenset(range(6 // mini_batches))
    assert out["loss"] == pytest.approx(ref["loss"], rel=1e-6, abs=1e-8) and abs(ref["loss"]) > 1e-4
    assert out["ratio_mean"] == pytest.approx(ref["ratio_mean"], abs=1e-6)
    assert len(grads) == len(ref_grads) == mini_batches
    for a, b in zip(grads, ref_grads, strict=True):
        assert set(a) == set(b) and a
        for name in b:
            torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-7, msg=name)


def test_a_ratio_that_needs_separate_old_logprobs_keeps_the_pass(tmp_path):
    for over in ({"update_epochs": 2}, {"loss__mismatch_weight": True}, {"model": {**MODEL, "update_dropout": True}}):
        tr = _trainer(tmp_path / str(len(str(over))), "ctpo", 1, **over)
        _, _, fwd, batch = _update(tr, reuse=True)
        assert fwd[0] == (False, 6), over  # every row's old log-probs from the pre-update weights
        assert batch.own_old_rows == frozenset() and batch.old_logp_computed


def test_adamw_takes_the_multi_tensor_path():
    cpu = [torch.nn.Parameter(torch.zeros(3))]
    assert adamw_path(cpu) == {"foreach": True}
    assert adamw_path(cpu, sharded=True) == {}
    if torch.cuda.is_available():
        assert adamw_path([torch.nn.Parameter(torch.zeros(3, device="cuda"))]) == {"fused": True}


def test_the_trainer_builds_adamw_with_foreach_on_cpu(tmp_path):
    tr = _trainer(tmp_path, "ctpo", 1)
    assert tr.optimizer.param_groups[0]["foreach"] is True
