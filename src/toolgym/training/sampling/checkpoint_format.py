"""Weights under the names and layout of a checkpoint on disk, for engines that load checkpoints (vLLM).

transformers 5 loads some checkpoints into a different in-memory layout: a mixture-of-experts layer keeps its
experts fused (``mlp.experts.gate_up_proj``: [experts, 2 * inner, hidden]) where the checkpoint has one tensor
per expert and projection (``mlp.experts.{i}.gate_proj.weight``). vLLM's model loaders read the checkpoint
layout, so a push of ``state_dict()`` names would not load (Mixtral: no module ``mlp``). ``save_pretrained``
reverts the layout with transformers' own conversion mapping; :func:`checkpoint_weights` applies the same
reversal, so an engine gets what ``save_pretrained`` would write, plus tied aliases (``lm_head.weight`` of a
model with tied embeddings), which ``save_pretrained`` drops: vLLM's in-place reload rebuilds every layer and
leaves a tied head that gets no tensor at its old values (measured on the CPU build: 1.4 nats off after a
push without it, 5e-5 with it).
"""

from __future__ import annotations

from typing import Any

import torch


def checkpoint_weights(model: Any, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``weights`` (the full policy under ``model``'s own state-dict names) with transformers' load-time
    conversions reverted, as ``model.save_pretrained`` writes them; tied aliases stay.

    ``model``: the plain transformers model (LoRA: the base model) whose conversions apply. With transformers
    4.x (no conversions) the weights come back as they are."""
    try:
        from transformers.core_model_loading import revert_weight_conversion
    except ImportError:  # transformers 4.x: the in-memory names are the checkpoint names
        return dict(weights)
    return revert_weight_conversion(model, dict(weights))
