"""LoRA through peft: the adapters train, the base stays frozen, and everything that leaves the trainer
(checkpoint ``hf/`` folders, exports, weights pushed to vLLM) is the merged model, so no consumer needs
peft. Checkpoints also keep the adapters alone (``adapter/``) so a resumed run continues training them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from toolgym.errors import ConfigError

ADAPTER_DIR = "adapter"


def apply_lora(model: torch.nn.Module, r: int, alpha: float, dropout: float, target_modules: list[str] | str) -> Any:
    """Wrap a transformers causal LM with fresh LoRA adapters (B = 0, so the wrapped policy equals the base)."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ConfigError("model.lora needs the peft package (pip install 'toolgym[train]')") from None
    conf = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=target_modules,
                      task_type="CAUSAL_LM", bias="none")
    try:
        return get_peft_model(model, conf)
    except ValueError as exc:  # e.g. a target module name the model does not have
        raise ConfigError(f"model.lora.target_modules: {str(exc).splitlines()[0]}") from None


def frozen_to(model: torch.nn.Module, dtype: torch.dtype) -> int:
    """Store every frozen floating-point parameter (LoRA's base) in ``dtype``; trainable ones (the adapters)
    keep theirs, as master weights. A tied parameter stays one parameter. Returns how many were cast.

    Why: under ``model.dtype: bf16`` the base never takes an optimizer step, so fp32 copies of it only cost
    memory (half of it, for the weights); adapters stay fp32 so small updates are not rounded away."""
    cast: dict[int, tuple[torch.nn.Parameter, torch.nn.Parameter]] = {}  # id -> (old, new): old kept alive
    for module in model.modules():
        for name, p in list(module._parameters.items()):
            if p is None or p.requires_grad or not p.is_floating_point() or p.dtype == dtype:
                continue
            if id(p) not in cast:
                cast[id(p)] = (p, torch.nn.Parameter(p.detach().to(dtype), requires_grad=False))
            module._parameters[name] = cast[id(p)][1]
    return len(cast)


def is_lora(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def base_model(model: Any) -> Any:
    """The transformers model under the adapters (for ``save_pretrained`` of the merged weights)."""
    return model.get_base_model() if is_lora(model) else model


@torch.no_grad()
def merged_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """The base model's state dict under its own (Hugging Face) names with every adapter's delta added:
    what the trained policy computes, as a plain model. The module itself is left unchanged."""
    if not is_lora(model):
        return model.state_dict()
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    deltas: dict[str, torch.Tensor] = {}
    for name, mod in base.named_modules():
        if isinstance(mod, LoraLayer):
            for adapter in mod.active_adapters:
                if adapter in mod.lora_A:
                    d = mod.get_delta_weight(adapter)
                    deltas[name] = deltas[name] + d if name in deltas else d
    out: dict[str, torch.Tensor] = {}
    for key, value in base.state_dict().items():
        if "lora_" in key:
            continue
        clean = key.replace(".base_layer.", ".")
        owner = clean.rsplit(".", 1)[0]
        if clean.endswith(".weight") and owner in deltas:
            value = value + deltas[owner].to(value.dtype)
        out[clean] = value
    return out


def adapter_state_dict(model: Any) -> dict[str, torch.Tensor]:
    from peft import get_peft_model_state_dict

    return {k: v.detach().cpu().clone() for k, v in get_peft_model_state_dict(model).items()}


def save_adapter(model: Any, folder: Path) -> None:
    """The adapters alone (peft's own format: ``adapter_config.json`` + ``adapter_model.safetensors``)."""
    model.save_pretrained(str(folder))


def load_adapter(model: Any, folder: Path) -> None:
    """Load adapters saved by :func:`save_adapter` into a model wrapped with the same LoRA configuration."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    sd = load_file(str(folder / "adapter_model.safetensors"))
    res = set_peft_model_state_dict(model, sd)
    missing = [k for k in getattr(res, "unexpected_keys", []) if "lora_" in k]
    if missing:
        raise RuntimeError(f"{folder}: adapter weights the model lacks: {missing[:3]}")


class AdaptersOff(torch.nn.Module):
    """The base policy of a LoRA model (adapters disabled), as a module: the reference policy for free.

    It holds the LoRA model without registering it, so it owns no parameters and no state of its own."""

    def __init__(self, lora_model: Any) -> None:
        super().__init__()
        self.__dict__["_lora"] = lora_model

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with self._lora.disable_adapter():
            return self._lora(*args, **kwargs)
