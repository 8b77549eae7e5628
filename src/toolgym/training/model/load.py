"""Loading the policy: a local folder, a toolgym asset or a Hugging Face Hub id, or the tiny ``demo`` model.

Weights load in float32 whatever ``model.dtype`` says: bf16 is mixed precision (fp32 master weights,
bf16 autocast in the trainer), never a cast of the module; only a LoRA run's frozen base is then stored in
bf16 (``lora.frozen_to``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from toolgym.errors import ConfigError
from toolgym.training.config_schema import TrainConfig


def load_policy(cfg: TrainConfig, out_dir: Path, demos: list[dict[str, Any]] | None = None) -> tuple[Any, Any]:
    """(model, tokenizer) from ``model.name_or_path``: ``demo`` builds the tiny demonstration model."""
    import transformers

    mc = cfg.model
    if mc.name_or_path == "demo" or mc.name_or_path.startswith("demo:"):
        from toolgym.training.model import demo as demo_model

        saved = out_dir / "demo-model"
        if (saved / "config.json").exists():
            tok = transformers.AutoTokenizer.from_pretrained(saved)
            model = transformers.AutoModelForCausalLM.from_pretrained(saved, dtype=torch.float32)
            return model, tok
        corpus = _demo_corpus(demos or [])
        kw = dict(mc.model_kwargs)
        vocab = int(kw.pop("vocab_size", 384))
        kw.setdefault("seed", cfg.seed)
        try:
            model, tok = demo_model.build_demo(corpus, None, vocab_size=vocab, **kw)
        except TypeError as exc:
            raise ConfigError(f"model.model_kwargs: {exc}; allowed for the demo model: layers, hidden, heads, "
                              "intermediate, max_positions, seed, vocab_size") from None
        return model, tok
    path = mc.name_or_path
    try:
        from toolgym.assets import asset_path

        path = str(asset_path(mc.name_or_path))
    except Exception:  # not an asset name: a local folder or a hub id
        pass
    dtype = torch.float32  # bf16 is mixed precision: fp32 master weights, bf16 autocast (Trainer.autocast)
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **mc.model_kwargs)
        tok = transformers.AutoTokenizer.from_pretrained(mc.tokenizer or path)
    except OSError as exc:
        raise ConfigError(f"model.name_or_path: cannot load {mc.name_or_path!r} ({str(exc).splitlines()[0]}); "
                          "give a fetched asset name (toolgym assets fetch NAME), a local folder, or 'demo'") from None
    return model, tok


def _demo_corpus(demos: list[dict[str, Any]]) -> list[str]:
    texts = []
    for d in demos:
        texts += [m.get("content") or "" for m in d["messages"]]
    n = max(len(demos), 50)
    texts += ["system\ntools: python", "user\n", "assistant\n", "tool\n", "Answer: ", "```python\nprint(", ")\n```",
              "What is ", "Traceback error"] * n
    return texts


def dropout_off(module: torch.nn.Module) -> int:
    """Put every dropout of ``module`` in eval mode, leaving the rest in its mode (training mode keeps gradient
    checkpointing on): ``nn.Dropout`` layers (LoRA's included) and attention modules whose dropout is functional
    (transformers reads ``self.training`` there). Returns how many modules it switched."""
    n = 0
    for m in module.modules():
        functional = isinstance(getattr(m, "attention_dropout", None), (float, int))
        if (isinstance(m, torch.nn.modules.dropout._DropoutNd) or functional) and m.training:
            m.eval()  # (an attention module's children go with it: projections, LoRA's dropout)
            n += 1
    return n
