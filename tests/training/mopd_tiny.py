"""Tiny in-process models for the MOPD tests: a byte-level BPE tokenizer trained on the fly
(with a chat template) and a 2-layer random Llama in fp32. Built in well under a second."""

from __future__ import annotations

import functools

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from tests.training.tiny import tiny_lm as base_tiny_lm

SPECIALS = ["<pad>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
CORPUS = [
    "What is 3 plus 4? The answer is 7.",
    "Compute 12 times 2. The answer is 24.",
    "Here is a correct solution to this problem: add the numbers.",
    "Here is a solution that is known to be wrong. Do not repeat its mistake.",
    "Now solve the original problem correctly.",
    "def add(a, b):\n    return a + b\n",
    "0 1 2 3 4 5 6 7 8 9 answer solution problem",
]


@functools.lru_cache(maxsize=1)
def tiny_tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 10, trainer)
    ht = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    ht.chat_template = CHAT_TEMPLATE
    return ht


def tiny_lm(vocab_size: int | None = None, seed: int = 0, dtype: torch.dtype = torch.float32) -> LlamaForCausalLM:
    return base_tiny_lm(vocab_size or len(tiny_tokenizer()), seed=seed, max_positions=4096, dtype=dtype)
