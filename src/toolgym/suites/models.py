"""Resolve a `--model` argument to local weights: an asset name from the toolgym cache, a local
folder, or (online) a Hugging Face Hub id. Loading imports torch/transformers lazily."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolgym.errors import AssetError


def resolve_model(model: str) -> str:
    """Local folder for `model`: an existing path, else a fetched toolgym asset, else the name itself
    (transformers then treats it as a Hub id, which needs the network)."""
    p = Path(model).expanduser()
    if p.exists():
        return str(p)
    try:
        from toolgym import assets
    except ImportError:
        return model
    try:
        return str(assets.asset_path(model))
    except AssetError:
        raise
    except Exception:  # not an asset name: let transformers try it as a Hub id
        return model


def load_causal_lm(model: str, *, dtype: str = "float32") -> tuple[Any, Any]:
    """(model, tokenizer) in eval mode on CPU; one actionable error when the weights are absent."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model(model)
    try:
        tok = AutoTokenizer.from_pretrained(path)
        lm = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    except OSError as exc:
        raise AssetError(
            f"cannot load model {model!r} ({exc.__class__.__name__}); "
            f"run `toolgym assets fetch {model}` or pass a local folder"
        ) from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return lm.eval(), tok
