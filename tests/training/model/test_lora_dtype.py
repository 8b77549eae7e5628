"""LoRA under ``model.dtype: bf16``: the frozen base is stored in bf16 (it never takes an optimizer step), the
adapters stay fp32 master weights with fp32 AdamW state, a tied embedding/head stays tied, and an update still
trains the adapters and leaves the base alone. Full fine-tuning keeps every weight in fp32."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import pytest
import torch

from tests.training.test_trainer import _groups
from tests.training.trainer_util import tiny_config
from toolgym.training.config import load_config
from toolgym.training.trainer import Trainer

LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj", "gate_proj"]}


def _trainer(tmp_path: Path, dtype: str, lora: bool) -> Trainer:
    model = {**tiny_config(tmp_path)["model"], "dtype": dtype, **({"lora": LORA} if lora else {})}
    tr = Trainer(load_config(tiny_config(tmp_path / f"{dtype}-{lora}", sft={"enabled": False}, model=model,
                                         optimizer={"lr": 5e-2})), console=False)
    tr.build()
    return tr


def _split(tr: Trainer) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    named = dict(tr.module.named_parameters())
    return ({k: p for k, p in named.items() if p.requires_grad}, {k: p for k, p in named.items() if not p.requires_grad})


def _update(tr: Trainer) -> dict:
    obj = tr.algorithm.objective(tr.cfg)
    batch, _ = obj.prepare(tr.ctx, _groups(tr, [[1.0, 0.0], [0.0, 1.0]]))
    return tr.update(batch, obj)


def test_lora_bf16_keeps_the_frozen_base_in_bf16_and_the_adapters_in_fp32(tmp_path) -> None:
    tr = _trainer(tmp_path, "bf16", lora=True)
    adapters, base = _split(tr)
    assert adapters and all("lora_" in k for k in adapters)
    assert all(p.dtype == torch.float32 for p in adapters.values())
    assert base and all(p.dtype == torch.bfloat16 for p in base.values())
    inner = tr.module.get_base_model()
    assert inner.lm_head.weight is inner.model.embed_tokens.weight, "the tied head must stay tied"

    before = {k: p.detach().clone() for k, p in base.items()}
    b_before = {k: p.detach().clone() for k, p in adapters.items() if "lora_B" in k}
    out = _update(tr)
    assert math.isfinite(out["loss"]) and out["optimizer_steps"] == 2 and out["rows_skipped_nonfinite"] == 0
    assert all(v.dtype == torch.float32 for s in tr.optimizer.state.values() for v in s.values() if v.is_floating_point())
    assert all(torch.equal(p, before[k]) for k, p in _split(tr)[1].items()), "the frozen base must not move"
    assert any(not torch.equal(p, b_before[k]) for k, p in _split(tr)[0].items() if "lora_B" in k), "adapters train"


@pytest.mark.parametrize(("dtype", "lora"), [("fp32", True), ("bf16", False)])
def test_full_fine_tuning_and_fp32_lora_keep_fp32_weights(tmp_path, dtype: str, lora: bool) -> None:
    tr = _trainer(tmp_path, dtype, lora)
    assert all(p.dtype == torch.float32 for p in tr.module.parameters())


@pytest.mark.device_standin
def test_lora_bf16_update_on_the_device(tmp_path, device, monkeypatch) -> None:
    from toolgym.training.update import data_parallel as D

    monkeypatch.setattr(D, "init", lambda spec=None: D.DistInfo(device=device))
    tr = _trainer(tmp_path, "bf16", lora=True)
    if device != "cuda":  # the stand-in has no autocast (tests/device_standin.py): bf16 base, fp32 adapters, as is
        monkeypatch.setattr(tr, "autocast", contextlib.nullcontext)
        tr.ctx.autocast = contextlib.nullcontext
    adapters, base = _split(tr)
    assert all(p.device.type == torch.device(device).type for p in tr.module.parameters())
    assert all(p.dtype == torch.bfloat16 for p in base.values())
    b_before = {k: p.detach().cpu().clone() for k, p in adapters.items() if "lora_B" in k}
    out = _update(tr)
    assert math.isfinite(out["loss"]) and out["optimizer_steps"] == 2
    assert any(not torch.equal(p.detach().cpu(), b_before[k]) for k, p in _split(tr)[0].items() if "lora_B" in k)
