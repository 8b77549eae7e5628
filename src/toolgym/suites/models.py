"""Resolve a `--model` argument to something `from_pretrained` loads: an existing local path, a toolgym
asset from the cache, or a Hugging Face Hub id (one resolver for all of toolgym, see
`toolgym.assets.resolve_model`). Loading imports torch/transformers lazily."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def resolve_model(model: str | Path, kind: str = "model") -> str:
    """A local folder, a fetched toolgym asset's folder, or a Hub id the local Hugging Face cache or the
    Hub has; raises AssetError with one line otherwise (e.g. offline)."""
    from toolgym.assets import resolve_model as _resolve

    return _resolve(model, kind)


def load_causal_lm(model: str, *, dtype: str = "float32", device: str = "auto") -> tuple[Any, Any]:
    """(model, tokenizer) in eval mode on ``device`` (auto | cpu | cuda | cuda:N); one actionable
    error when the weights cannot be had."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolgym._assets.names import load_error
    from toolgym.devices import resolve_device

    dev = resolve_device(device, what="--device", local_rank=None)
    path = resolve_model(model)
    try:
        tok = AutoTokenizer.from_pretrained(path)
        lm = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    except (OSError, ValueError) as exc:
        raise load_error(model, "model", exc) from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return lm.to(dev).eval(), tok
