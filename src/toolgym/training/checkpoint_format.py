"""Weights under the names and layout of a checkpoint on disk, for engines that load checkpoints (vLLM).

transformers 5 loads some checkpoints into a different in-memory layout: a mixture-of-experts layer keeps its
experts fused (``mlp.experts.gate_up_proj``: [experts, 2 * inner, hidden]) where the checkpoint has one tensor
per expert and projection (``mlp.experts.{i}.gate_proj.weight``). vLLM's model loaders read the checkpoint
layout, so a push of ``state_dict()`` names would not load. ``save_pretrained`` reverts the layout with
transformers' own conversion mapping; :func:`checkpoint_weights` applies the same steps, so what an engine
gets is what ``save_pretrained`` would write.
"""

from __future__ import annotations

from typing import Any

import torch


def checkpoint_weights(model: Any, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``weights`` (the full policy under ``model``'s own state-dict names) as ``model.save_pretrained`` writes
    them: tied aliases dropped (the engine ties them itself), transformers' load-time conversions reverted.

    ``model``: the plain transformers model (LoRA: the base model) whose conversions apply. With transformers
    4.x (no conversions) the weights come back as they are."""
    try:
        from transformers.core_model_loading import revert_weight_conversion
        from transformers.modeling_utils import remove_tied_weights_from_state_dict
    except ImportError:  # transformers 4.x: the in-memory names are the checkpoint names
        return dict(weights)
    out = remove_tied_weights_from_state_dict(dict(weights), model)
    return revert_weight_conversion(model, out)
