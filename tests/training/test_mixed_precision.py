"""``model.dtype: bf16`` is mixed precision: fp32 master weights and AdamW, forward and loss under
``torch.autocast(bfloat16)``, the EMA teacher in fp32. Small learning rates must still move the weights.

The control in each test reproduces the old behaviour (the module cast to bf16, AdamW on bf16 parameters, a
bf16 teacher) and shows it fails the same thresholds: with lr = 1e-5 a step of ~1e-5 is below half a bf16 ulp
for every weight of magnitude >= ~2.6e-3 (bf16 keeps 8 significant bits), so most updates round away.
Measured on this model, 2 steps of 2 mini-batches at lr 1e-5: bf16 mixed precision changes 100% of the
parameter elements with cosine 0.9997 to the fp32 run's update; the old cast changes 15% with cosine 0.37.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from toolgym.training.config import load_config
from toolgym.training.trainer import Trainer

from .test_mopd_trainer import _groups as _mopd_groups
from .test_trainer import _groups
from .trainer_util import tiny_config

LR = 1e-5
MODEL = {"name_or_path": "demo", "model_kwargs": {"layers": 1, "hidden": 32, "heads": 2, "intermediate": 64,
                                                  "max_positions": 1024, "vocab_size": 300}}
FRAC_MIN = 0.9  # share of parameter elements an update must change
COS_MIN = 0.99  # cosine of the whole update vector with the fp32 run's


def _trainer(tmp_path: Path, dtype: str, *, old_cast: bool = False, **over) -> Trainer:
    data = tiny_config(tmp_path / f"run-{dtype}-{old_cast}", **{"sft__enabled": False, "model": {**MODEL, "dtype": dtype},
                                                                 "optimizer": {"lr": LR, "weight_decay": 0.0}, **over})
    tr = Trainer(load_config(data), console=False)
    tr.build()
    if old_cast:  # what model.dtype: bf16 did before: the module itself in bf16, AdamW on bf16 parameters
        tr.module.to(torch.bfloat16)  # (in place: the optimizer holds these same, now bf16, parameters)
    return tr


def _train(tr: Trainer, steps: int = 2) -> torch.Tensor:
    """The update vector (after - before, float32, all parameters flattened) of ``steps`` trainer steps."""
    obj = tr.algorithm.objective(tr.cfg)
    before = [p.detach().float().clone() for p in tr.module.parameters()]
    for _ in range(steps):
        batch, _ = obj.prepare(tr.ctx, _groups(tr, [[1.0, 0.0], [0.0, 1.0]]))
        out = tr.update(batch, obj)
        assert out["optimizer_steps"] == 2 and out["rows_skipped_nonfinite"] == 0
    return torch.cat([(p.detach().float() - b).flatten() for p, b in zip(tr.module.parameters(), before, strict=True)])


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=0))


def test_bf16_small_lr_moves_the_weights_like_fp32_and_the_old_cast_does_not(tmp_path):
    ref = _train(_trainer(tmp_path, "fp32"))
    assert float((ref != 0).float().mean()) > FRAC_MIN

    tr = _trainer(tmp_path, "bf16")
    assert tr.cfg.model.dtype == "bf16"
    seen: list[tuple[torch.dtype, bool]] = []
    head = tr.module.get_output_embeddings()
    proj = next(m for m in tr.module.modules() if isinstance(m, torch.nn.Linear) and m is not head)
    hook = proj.register_forward_hook(lambda m, i, o: seen.append((o.dtype, torch.is_autocast_enabled("cpu"))))
    mixed = _train(tr)
    hook.remove()
    assert {d for d, on in seen if on} == {torch.bfloat16}, "the forward must run under bf16 autocast"
    # but prompt sharing's once-per-model check, which compares the shared and per-row paths in the weights'
    # precision (fp32): the shared prompts, their completions, the per-row forward
    assert [d for d, on in seen if not on] == [torch.float32] * 3, seen
    assert all(p.dtype == torch.float32 for p in tr.module.parameters()), "master weights stay fp32"
    assert all(v.dtype == torch.float32 for s in tr.optimizer.state.values() for v in s.values() if v.is_floating_point())
    frac = float((mixed != 0).float().mean())
    assert frac > FRAC_MIN, frac
    assert _cos(mixed, ref) > COS_MIN
    assert 0.9 < float(mixed.norm() / ref.norm()) < 1.1

    old = _train(_trainer(tmp_path, "fp32", old_cast=True))  # control: the old behaviour fails both thresholds
    assert float((old != 0).float().mean()) < 0.5
    assert _cos(old, ref) < 0.9


def test_fp32_default_has_no_autocast(tmp_path):
    tr = _trainer(tmp_path, "fp32")
    assert load_config(tiny_config(tmp_path / "d")).model.dtype == "fp32"
    seen: list[torch.dtype] = []
    hook = tr.module.get_output_embeddings().register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    _train(tr, steps=1)
    hook.remove()
    assert seen and set(seen) == {torch.float32}


def test_bf16_first_minibatch_is_on_policy(tmp_path):
    """Old log-probs are computed under the same autocast as the loss: the first ratio is exactly 1 in bf16 too."""
    tr = _trainer(tmp_path, "bf16")
    obj = tr.algorithm.objective(tr.cfg)
    batch, _ = obj.prepare(tr.ctx, _groups(tr, [[1.0, 0.0], [0.0, 1.0]]))
    with tr.autocast():
        _, m = obj.loss(tr.ctx, batch, [0, 1], 8.0, 2.0)
    assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-6)


def test_bf16_ema_teacher_is_fp32_and_follows_a_small_step(tmp_path):
    tr = _trainer(tmp_path, "bf16", algorithm="mopd", mini_batches=1,
                  options={"k": 20, "max_teacher_tokens": 512, "ema_rate": 0.05})
    obj = tr.algorithm.objective(tr.cfg)
    batch, _ = obj.prepare(tr.ctx, _mopd_groups(tr, [[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]))
    teacher = obj.teacher.model
    assert all(p.dtype == torch.float32 for p in teacher.parameters())
    t_before = {k: v.clone() for k, v in teacher.state_dict().items()}
    s_before = {k: v.clone() for k, v in tr.module.state_dict().items()}
    tr.update(batch, obj)
    obj.after_update(tr.ctx)
    student = tr.module.state_dict()
    moved = [k for k in student if student[k].is_floating_point() and not torch.equal(student[k], s_before[k])]
    assert moved
    changed = total = 0
    old_changed = 0
    for k in moved:
        got = teacher.state_dict()[k]
        torch.testing.assert_close(got, torch.lerp(t_before[k], student[k], 0.05), rtol=0, atol=1e-9)
        changed += int((got != t_before[k]).sum())
        total += got.numel()
        # control: a bf16 teacher (the old cast) taking the same EMA step
        t16 = t_before[k].to(torch.bfloat16)
        old_changed += int((t16.lerp(student[k].to(torch.bfloat16), 0.05) != t16).sum())
    assert changed / total > FRAC_MIN, changed / total
    assert old_changed / total < 0.5, old_changed / total
