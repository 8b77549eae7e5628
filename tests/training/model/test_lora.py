"""LoRA through peft: only adapters train, what leaves the trainer is the merged model (checked against
peft's own merge), a resumed run continues the adapters, and MOPD's frozen teacher is the base policy."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.training.tiny import tiny_lm
from tests.training.trainer_util import tiny_config
from toolgym.errors import ConfigError
from toolgym.training.config import load_config
from toolgym.training.model.lora import AdaptersOff, apply_lora, merged_state_dict
from toolgym.training.trainer import Trainer

LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj", "gate_proj"]}


def _logprobs(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    return torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def _randomise_adapters(model) -> None:
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:  # B starts at zero (the adapters add nothing): make them matter
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)


def test_merged_state_dict_equals_peft_merge_and_leaves_the_model_unchanged():
    import copy

    model = apply_lora(tiny_lm(vocab=64, seed=0), r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"])
    _randomise_adapters(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ours = merged_state_dict(model)
    assert not any("lora_" in k or "base_layer" in k for k in ours)
    for k, v in model.state_dict().items():  # merging did not touch the live model
        assert torch.equal(v, before[k]), k
    reference = copy.deepcopy(model).merge_and_unload().state_dict()  # peft's own merge
    assert set(ours) == set(reference)
    for k in reference:
        torch.testing.assert_close(ours[k], reference[k], rtol=0, atol=1e-6)
    plain = tiny_lm(vocab=64, seed=5)
    plain.load_state_dict(ours)
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(_logprobs(plain, ids), _logprobs(model, ids), rtol=0, atol=1e-5)
    off = AdaptersOff(model)  # the base policy: what the model computed before its adapters moved
    torch.testing.assert_close(_logprobs(off, ids), _logprobs(tiny_lm(vocab=64, seed=0), ids), rtol=0, atol=1e-6)
    assert list(off.parameters()) == []


def _lora_config(out: Path, steps: int, **over) -> dict:
    cfg = tiny_config(out, steps=steps, model={**tiny_config(out)["model"], "lora": LORA}, optimizer={"lr": 5e-2},
                      checkpoint={"every": 1, "keep_last": 3}, **over)
    cfg["rollout"]["env_kwargs"].update(ops="+", format_weight=1.0)  # rewards that vary within a group
    return cfg


def _lora_run(out: Path, steps: int, **over) -> Trainer:
    cfg = load_config(_lora_config(out, steps, **over))
    tr = Trainer(cfg, console=False)
    tr.fit(resume=True)
    return tr


def test_lora_run_trains_adapters_only_and_checkpoints_the_merged_policy(tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    out = tmp_path / "run"
    tr = _lora_run(out, steps=2)
    base = AutoModelForCausalLM.from_pretrained(out / "demo-model", dtype=torch.float32).eval()  # the initial model
    trained_base = tr.module.get_base_model()
    moved = 0
    for name, p in trained_base.named_parameters():
        if "lora_" in name:
            moved += int(not torch.equal(p, torch.zeros_like(p))) if "lora_B" in name else 0
            continue
        ref = dict(base.named_parameters())[name.replace(".base_layer.", ".")]
        assert torch.equal(p.detach(), ref), f"{name}: a frozen base weight changed"
    assert moved > 0, "no LoRA B matrix moved away from zero"
    ckpt = out / "checkpoints" / "step-000002"
    assert (ckpt / "adapter" / "adapter_model.safetensors").exists()
    hf = AutoModelForCausalLM.from_pretrained(ckpt / "hf", dtype=torch.float32).eval()  # no peft needed
    assert not any("lora_" in k for k in load_file(str(ckpt / "hf" / "model.safetensors")))
    ids = torch.randint(3, 300, (2, 16), generator=torch.Generator().manual_seed(0))
    tr.module.eval()
    torch.testing.assert_close(_logprobs(hf, ids), _logprobs(tr.module, ids), rtol=0, atol=1e-5)
    assert (_logprobs(hf, ids) - _logprobs(base, ids)).abs().max() > 1e-3, "the merged policy equals the base"


@pytest.mark.slow
def test_lora_resume_continues_the_adapters(tmp_path):
    full = _lora_run(tmp_path / "full", steps=2)
    _lora_run(tmp_path / "part", steps=1)
    resumed = _lora_run(tmp_path / "part", steps=2)
    a = {k: v for k, v in full.module.state_dict().items() if "lora_" in k}
    b = {k: v for k, v in resumed.module.state_dict().items() if "lora_" in k}
    assert a and set(a) == set(b)
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=1e-6)


def test_lora_refuses_a_checkpoint_without_adapters(tmp_path):
    out = tmp_path / "run"
    Trainer(load_config(tiny_config(out, steps=1, sft={"enabled": False})), console=False).fit()
    with pytest.raises(ConfigError, match="adapter/ folder"):
        _lora_run(out, steps=2)


def test_bad_lora_target_is_one_line(tmp_path):
    cfg = load_config(tiny_config(tmp_path / "r", steps=1, sft={"enabled": False},
                                  model={**tiny_config(tmp_path)["model"], "lora": {"r": 4, "target_modules": ["nope"]}}))
    with pytest.raises(ConfigError, match="model.lora.target_modules") as info:
        Trainer(cfg, console=False).fit()
    assert "\n" not in str(info.value)


def test_mopd_frozen_teacher_of_a_lora_run_is_the_base_policy(tmp_path):
    from types import SimpleNamespace

    from toolgym.training.algorithms.distillation.objective import DistillationObjective

    cfg = load_config(tiny_config(tmp_path / "m", algorithm="mopd", sft={"enabled": False},
                                  model={**tiny_config(tmp_path)["model"], "lora": LORA},
                                  options={"ema_rate": 0.0}))
    student = apply_lora(tiny_lm(vocab=64, seed=0), r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj"])
    _randomise_adapters(student)  # the student has moved away from its base
    teacher = DistillationObjective(cfg)._ensure_teacher(SimpleNamespace(module=student)).model
    ids = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(_logprobs(teacher, ids), _logprobs(tiny_lm(vocab=64, seed=0), ids), rtol=0, atol=1e-6)
    assert (_logprobs(teacher, ids) - _logprobs(student, ids)).abs().max() > 1e-3
    assert sum(p.numel() for p in teacher.parameters()) == 0  # no copy of the model
