"""The trainer on an accelerator (CUDA where present, else the CPU stand-in device of tests/device_standin.py;
its docstring says what the stand-in cannot catch).

Every update step here runs twice, on the device and on the CPU, from the same seed: the device run must
not fail, its weights must stay on the device, and it must move them as the CPU run does. Before the device
fixes, CTPO and GRPO stopped at the first loss call (a CPU old-log-prob tensor met the device batch) and
every objective at the metrics (``.numpy()`` of a device tensor).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from toolgym.training.config import load_config
from toolgym.training.trainer import Trainer
from toolgym.training.update import data_parallel as D

from .test_mopd_trainer import _groups
from .trainer_util import tiny_config

pytestmark = pytest.mark.device_standin

MOPD = {"algorithm": "mopd", "mini_batches": 1, "options": {"k": 20, "max_teacher_tokens": 256}}
CASES = {
    "ctpo": {},
    "grpo": {"algorithm": "grpo", "mini_batches": 2},
    "mopd": MOPD,
    "mopd-rl": {**MOPD, "options": {**MOPD["options"], "rl_coef": 0.5}},
}


def _trainer(tmp_path: Path, device: str, monkeypatch: pytest.MonkeyPatch, **over) -> Trainer:
    data = tiny_config(tmp_path, **{"sft__enabled": False, **over})
    if data["algorithm"] != "ctpo" and "mini_batches" not in over:
        data.pop("mini_batches")
    if device != "cpu":
        monkeypatch.setattr(D, "init", lambda spec=None: D.DistInfo(device=device))
    tr = Trainer(load_config(data), console=False)
    tr.build()
    return tr


def _update(tmp_path: Path, device: str, monkeypatch: pytest.MonkeyPatch, over: dict) -> tuple[dict, dict, Trainer]:
    tr = _trainer(tmp_path, device, monkeypatch, **over)
    obj = tr.algorithm.objective(tr.cfg)
    tr.objective = obj
    batch, prep = obj.prepare(tr.ctx, _groups(tr, [[1.0, 0.0], [0.0, 1.0]]))
    out = tr.update(batch, obj)
    weights = {k: v.detach().cpu().clone() for k, v in tr.module.state_dict().items()}
    return {**prep, **out}, weights, tr


@pytest.mark.parametrize("case", list(CASES))
def test_an_update_step_on_the_device_equals_the_cpu_step(tmp_path, device, monkeypatch, case) -> None:
    over = CASES[case]
    m_dev, w_dev, tr = _update(tmp_path / "dev", device, monkeypatch, over)
    assert all(p.device.type == torch.device(device).type for p in tr.module.parameters())
    assert all(p.grad is None for p in tr.module.parameters()), "gradients are freed after each optimizer step"
    monkeypatch.undo()
    m_cpu, w_cpu, _ = _update(tmp_path / "cpu", "cpu", monkeypatch, over)
    assert math.isfinite(m_dev["loss"]) and m_dev["optimizer_steps"] == m_cpu["optimizer_steps"] >= 1
    assert m_dev["loss"] == pytest.approx(m_cpu["loss"], rel=1e-4, abs=1e-6)
    assert m_dev["grad_norm"] == pytest.approx(m_cpu["grad_norm"], rel=1e-4)
    # Adam divides each gradient element by its own running scale, so where a gradient is at rounding level
    # (MOPD's first update: teacher and student nearly agree, loss ~4e-6) a last-bit difference between the
    # two devices' reductions becomes a step difference of up to lr per element. The gradients agree (above);
    # the weights must agree to 1% of one step (a wrong or missing device gradient is a whole step off).
    lr = tr.cfg.optimizer.lr
    moved = [k for k in w_cpu if not torch.equal(w_cpu[k], w_dev[k])]
    assert not moved or all(torch.allclose(w_dev[k], w_cpu[k], rtol=1e-4, atol=1e-2 * lr) for k in moved)
    init = _trainer(tmp_path / "init", "cpu", monkeypatch, **over).module.state_dict()
    assert any(not torch.equal(init[k], w_dev[k]) for k in w_dev), "the device update must move the weights"
    for key in ("clip_frac", "ratio_mean", "mopd/divergence_mean"):
        if key in m_cpu:
            assert m_dev[key] == pytest.approx(m_cpu[key], rel=1e-4, abs=1e-6), key


def test_a_whole_step_with_rollouts_on_the_device(tmp_path, device, monkeypatch) -> None:
    """Rollouts through the HF sampler on the device's module, then prepare and update: the step the CLI runs."""
    tr = _trainer(tmp_path, device, monkeypatch, rollout={**tiny_config(tmp_path)["rollout"], "sandbox": None,
                                                          "env_kwargs": {"min_digits": 1, "max_digits": 1,
                                                                         "system_prompt": None, "max_turns": 1,
                                                                         "parser": "none"}})
    obj = tr.objective = tr.algorithm.objective(tr.cfg)
    tr._build_rollouts()
    tr.ctx.separate_sampler = tr.orchestrator.samples_elsewhere
    try:
        m = tr.step(0, 0, obj)
    finally:
        tr.orchestrator.close()
    assert m["episodes"] == 4 and math.isfinite(m["loss"]) and m["optimizer_steps"] == tr.cfg.mini_batches
    assert all(p.device.type == torch.device(device).type for p in tr.module.parameters())
