"""What a weight push gives a checkpoint-loading engine (vLLM): the names and tensors ``save_pretrained`` writes
(and a tied head, which it drops).

transformers 5 keeps a mixture-of-experts layer's experts fused in memory (``mlp.experts.gate_up_proj``);
checkpoints, and vLLM's loaders, have one tensor per expert and projection, and Mixtral's are also named
otherwise (``block_sparse_moe.experts.{i}.w1``: vLLM refuses ``mlp`` names there, see test_vllm_push.py).
Tiny Qwen3-MoE and Mixtral models built here (2 layers, 4 experts, random weights) stand for the real ones."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import (
    AutoModelForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    Qwen3MoeConfig,
    Qwen3MoeForCausalLM,
)

from toolgym.training.model.lora import apply_lora
from toolgym.training.sampling.checkpoint_format import checkpoint_weights
from toolgym.training.sampling.policy_sync import PolicySync


def tiny_moe(tied: bool, hidden: int = 32, head_dim: int = 8, moe_inner: int = 16, arch: str = "qwen3_moe") -> Any:
    """2 layers, 4 experts, random weights. The vLLM test passes hidden 64, head_dim 32 (vLLM's CPU attention
    needs 32 or more) and moe_inner 32 (its CPU MoE kernel's alignment)."""
    torch.manual_seed(0)
    common = dict(vocab_size=64, hidden_size=hidden, num_hidden_layers=2, num_attention_heads=hidden // head_dim,
                  num_key_value_heads=2, head_dim=head_dim, num_experts_per_tok=2, max_position_embeddings=128,
                  tie_word_embeddings=tied)
    if arch == "mixtral":  # checkpoint names differ beyond the fusing: block_sparse_moe.experts.{i}.w1 / w2 / w3
        return MixtralForCausalLM(MixtralConfig(intermediate_size=moe_inner, num_local_experts=4, **common)).eval()
    return Qwen3MoeForCausalLM(Qwen3MoeConfig(intermediate_size=64, moe_intermediate_size=moe_inner, num_experts=4,
                                              **common)).eval()


class CheckpointEngine:
    """Records what a checkpoint-loading engine (``weight_names = "checkpoint"``, as VLLMSampler) is pushed."""

    weight_names = "checkpoint"

    def __init__(self) -> None:
        self.weights: dict[str, torch.Tensor] = {}

    def update_weights(self, sd):
        self.weights = {k: v.clone() for k, v in sd.items()}


def _saved(model, folder) -> dict[str, torch.Tensor]:
    model.save_pretrained(folder)
    return load_file(str(folder / "model.safetensors"))


@pytest.mark.parametrize(("arch", "tied", "expert_name"), [
    ("qwen3_moe", False, "model.layers.1.mlp.experts.3.gate_proj.weight"),
    ("qwen3_moe", True, "model.layers.1.mlp.experts.3.gate_proj.weight"),
    ("mixtral", False, "model.layers.1.block_sparse_moe.experts.3.w1.weight"),
])
def test_push_is_what_save_pretrained_writes_and_reloads_into_the_fused_layout(tmp_path, arch, tied, expert_name):
    model = tiny_moe(tied, arch=arch)
    fused = {k: v.clone() for k, v in model.state_dict().items()}
    assert "model.layers.0.mlp.experts.gate_up_proj" in fused  # the in-memory layout this is about
    engine = CheckpointEngine()
    PolicySync(engine, model, sleep=False).push()
    saved = _saved(model, tmp_path / "saved")
    # save_pretrained drops a tied head; the push keeps it (vLLM's in-place reload leaves a head it is not
    # given at its old values)
    assert set(engine.weights) == set(saved) | {"lm_head.weight"}
    assert ("lm_head.weight" in saved) is not tied
    assert torch.equal(engine.weights["lm_head.weight"], model.lm_head.weight)
    assert expert_name in engine.weights
    assert not any(k.endswith(("experts.gate_up_proj", "experts.down_proj")) for k in engine.weights)
    for k, v in saved.items():
        assert torch.equal(engine.weights[k], v), k
    # the round trip: the pushed checkpoint, loaded by transformers, is the fused model again
    folder = tmp_path / "pushed"
    folder.mkdir()
    model.config.save_pretrained(folder)
    save_file({k: v.contiguous() for k, v in engine.weights.items()}, str(folder / "model.safetensors"))
    back = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).state_dict()
    assert set(back) == set(fused)
    for k, v in fused.items():
        assert torch.equal(back[k], v), k


def test_lora_push_is_the_merged_base_in_checkpoint_layout(tmp_path):
    model = apply_lora(tiny_moe(tied=False), r=4, alpha=8, dropout=0.0, target_modules=["q_proj"])
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.fill_(0.1)
    engine = CheckpointEngine()
    PolicySync(engine, model, sleep=False).push()
    merged = model.merge_and_unload()  # peft's own merge, saved the way save_pretrained saves it
    saved = _saved(merged, tmp_path / "merged")
    assert set(engine.weights) == set(saved)  # untied: save_pretrained keeps the head too
    for k, v in saved.items():
        torch.testing.assert_close(engine.weights[k], v, rtol=0, atol=1e-6)


def test_a_transformers_replica_gets_the_models_own_names():
    # samplers without weight_names = "checkpoint" (an HF replica) load with load_state_dict: in-memory names
    class Replica:
        def update_weights(self, sd):
            self.weights = sd

    model = tiny_moe(tied=False)
    replica = Replica()
    PolicySync(replica, model, sleep=False).push()
    assert set(replica.weights) == set(model.state_dict())
    assert checkpoint_weights(model, model.state_dict()).keys() != replica.weights.keys()
