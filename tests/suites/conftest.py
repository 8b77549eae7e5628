"""Fixtures for suite tests: a tiny Llama built from a config and a byte-level BPE tokenizer
trained on the fly (fast, offline, deterministic), and the same model saved with a chat template."""

from __future__ import annotations

from pathlib import Path

import pytest

CORPUS = [
    "Question: Which gas do plants absorb from the air?\nAnswer: carbon dioxide",
    "Question: What is the boiling point of water at sea level?\nAnswer: 100 degrees Celsius",
    "The quick brown fox jumps over the lazy dog. Energy is conserved in a closed system.",
    "def add(a, b):\n    return a + b\n",
]


@pytest.fixture(scope="session")
def tiny_lm():
    torch = pytest.importorskip("torch")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>", "<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer)
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(hf_tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      pad_token_id=0, eos_token_id=1, bos_token_id=1)
    model = LlamaForCausalLM(cfg).eval()
    return model, hf_tok


CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<eos>{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory, tiny_lm) -> Path:
    """The tiny model saved with a chat template: a real model for every sampler and mode."""
    model, tok = tiny_lm
    d = tmp_path_factory.mktemp("tiny-chat")
    tok.chat_template = CHAT_TEMPLATE
    model.save_pretrained(d)
    tok.save_pretrained(d)
    tok.chat_template = None
    return d
