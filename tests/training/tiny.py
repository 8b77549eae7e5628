"""A tiny config-built causal LM for fast trainer tests (random weights, fp32)."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def tiny_lm(vocab: int = 64, seed: int = 0, max_positions: int = 256,
            dtype: torch.dtype = torch.float32) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
    )
    return LlamaForCausalLM(cfg).to(dtype).eval()
