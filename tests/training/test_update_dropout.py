"""Dropout in policy updates: off unless ``model.update_dropout`` asks.

The old log-probs come from a no-grad pass without dropout; with dropout on in the update, the ratio of an
on-policy mini-batch is not 1, and CTPO's cumulative ratio adds that noise up along the sequence (a LoRA
dropout of 0.05 clipped 31% of tokens on-policy in an earlier measurement)."""

from __future__ import annotations

import torch

from toolgym.training.config import load_config
from toolgym.training.trainer import Trainer

from .test_trainer import _groups
from .trainer_util import tiny_config

LORA = {"r": 4, "alpha": 8, "dropout": 0.5, "target_modules": ["q_proj", "v_proj"]}


def _first_minibatch(tmp_path, asked: bool) -> tuple[float, float]:
    model = {**tiny_config(tmp_path)["model"], "lora": LORA, "update_dropout": asked}
    tr = Trainer(load_config(tiny_config(tmp_path, sft__enabled=False, model=model)), console=False)
    tr.build()
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():  # B starts at 0, where LoRA's dropout changes nothing: give the adapters a say
        for name, p in tr.module.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    obj = tr.algorithm.objective(tr.cfg)
    batch, _ = obj.prepare(tr.ctx, _groups(tr, [[1.0, 0.0], [0.0, 1.0]]))
    tr.train_mode()
    _, m = obj.loss(tr.ctx, batch, [0, 1], 8.0, 2.0)
    return float(m["ratio_mean"]), float(m["clip_frac"])


def test_an_on_policy_update_has_ratio_one_unless_dropout_is_asked_for(tmp_path, capsys) -> None:
    ratio, clipped = _first_minibatch(tmp_path / "off", asked=False)
    assert ratio == 1.0 and clipped == 0.0
    ratio, clipped = _first_minibatch(tmp_path / "on", asked=True)
    assert abs(ratio - 1.0) > 1e-3  # dropout in the update: the same weights give other log-probs
    assert "model.update_dropout is on" in capsys.readouterr().out
