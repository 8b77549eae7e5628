"""Fixtures for the agents tests: a tiny tokenizer + model built in-process, real tokenizers from the
asset cache, and small environments defined here (the real ones come from toolgym.envs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.requirements import need

CHATML_TEMPLATE = (
    "{%- if tools %}{{ '<|im_start|>system\\n' }}{% if messages[0].role == 'system' %}{{ messages[0].content + '\\n\\n' }}{% endif %}"
    "{{ '<tools>\\n' }}{% for t in tools %}{{ t | tojson + '\\n' }}{% endfor %}{{ '</tools><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}{{ '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}{%- if m.role != 'system' %}"
    "{%- set c = m.content %}"
    # history rewriting like Qwen3: earlier assistant turns lose their <think> block
    "{%- if m.role == 'assistant' and not loop.last and '</think>' in c %}{%- set c = c.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{{ '<|im_start|>' + m.role + '\\n' + c + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"
)

CORPUS = [
    "What is 2 + 3? Use the calculator tool. The answer is 5.",
    "<tool_call>{\"name\": \"calc\", \"arguments\": {\"expr\": \"2+3\"}}</tool_call>",
    "<think>I should add the numbers.</think> result 1 result 2 tool system user assistant",
    "The quick brown fox jumps over the lazy dog. 0123456789 + - * / = ( ) { } [ ] : , \" '",
] * 20


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer Qwen2 with a BPE tokenizer trained on the fly and a ChatML template, saved to disk."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHATML_TEMPLATE
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      tie_word_embeddings=True, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id)
    model = Qwen2ForCausalLM(cfg)
    out = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(out)
    fast.save_pretrained(out)
    return out


def asset_dir(name: str) -> Path | None:
    try:
        from toolgym.assets import asset_path
    except ImportError:
        return None
    try:
        p = Path(asset_path(name))
    except Exception:
        return None
    return p if p.exists() else None


@pytest.fixture(scope="session")
def qwen3_tokenizer() -> Any:
    from transformers import AutoTokenizer

    p = asset_dir("qwen3-tokenizer")
    need(p is not None, "the qwen3-tokenizer asset is missing: run `toolgym assets fetch qwen3-tokenizer`")
    return AutoTokenizer.from_pretrained(str(p))


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    p = asset_dir("smollm2-135m-instruct")
    need(p is not None, "the smollm2-135m-instruct asset is missing: run `toolgym assets fetch smollm2-135m-instruct`")
    return p  # type: ignore[return-value]
