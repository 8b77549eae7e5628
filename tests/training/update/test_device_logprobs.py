"""The chunked LM head on an accelerator (CUDA where present, else the CPU stand-in device of
tests/device_standin.py; its docstring says what the stand-in cannot catch): log-probs, entropies and every
parameter's gradient equal the plain full-logits path on the CPU, for a tied head and for LoRA adapters."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.training.update.test_lm_head import _assert_same, _batch, _run, _tied_lm
from toolgym.training.update.logprobs import response_logprobs

pytestmark = pytest.mark.device_standin


def _lora(model: torch.nn.Module) -> torch.nn.Module:
    from toolgym.training.model.lora import apply_lora

    model = apply_lora(model, r=4, alpha=8, dropout=0.0, target_modules=["q_proj", "v_proj", "down_proj"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3, generator=torch.Generator().manual_seed(len(name)))
    return model


@pytest.mark.parametrize("kind", ["tied", "lora"])
def test_chunked_logprobs_on_the_device_equal_full_logits_on_the_cpu(device: str, kind: str) -> None:
    cpu = _tied_lm() if kind == "tied" else _lora(_tied_lm())
    ref = _run(cpu, _batch(96), "full")
    model = copy.deepcopy(cpu).to(device)
    assert all(p.device.type == torch.device(device).type for p in model.parameters())
    if kind == "tied":
        assert model.lm_head.weight is model.model.embed_tokens.weight
    ours = _run(model, _batch(96).to(device), "chunked")
    _assert_same(ours, ref)


def test_old_logprobs_pass_without_grad_on_the_device(device: str) -> None:
    cpu = _tied_lm()
    with torch.no_grad():
        ref, _ = response_logprobs(cpu, _batch(96), temperature=0.7, head="full")
        lp, _ = response_logprobs(copy.deepcopy(cpu).to(device), _batch(96).to(device), temperature=0.7)
    assert lp.device.type == torch.device(device).type and not lp.requires_grad
    torch.testing.assert_close(lp.cpu(), ref, rtol=1e-5, atol=1e-5)
