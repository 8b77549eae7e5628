"""A tiny config-built causal LM and a tokenizer trained on the fly, for CPU demonstrations and tests.

Why: a real RL loop (rollouts with a sandboxed tool, SFT warm start, CTPO updates) must run in
minutes on two cores. A 2-4 layer Llama with a few-hundred-token byte-level BPE vocabulary, trained
on the demonstration text itself, is small enough. Digits are single tokens so that copying numbers
(into the code block, and from the tool output into the answer) is a per-token copy.

The chat template is ChatML-like and prints tool names only (``tools: python``), which keeps prompts
a dozen tokens long; ``ChatTemplate.renders_tools()`` sees that it renders tools.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

IM_START, IM_END, PAD = "<|im_start|>", "<|im_end|>", "<|endoftext|>"

CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\ntools:{% for t in tools %} {{ t.function.name if t.function is defined "
    "else t.name }}{% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def train_tokenizer(corpus: Iterable[str], vocab_size: int = 384) -> Any:
    """Byte-level BPE (every byte is a token, so nothing is ever unknown), digits split one per token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[PAD, IM_START, IM_END],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(corpus), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=None, eos_token=IM_END, pad_token=PAD,
                                   unk_token=None)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(tokenizer: Any, layers: int = 2, hidden: int = 128, heads: int = 4, intermediate: int | None = None,
                max_positions: int = 512, seed: int = 0) -> Any:
    """A randomly initialised Llama sized by the arguments, fp32, with the tokenizer's special ids."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=intermediate or 4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
        bos_token_id=None,
    )
    model = LlamaForCausalLM(cfg).float()
    model.generation_config.eos_token_id = cfg.eos_token_id
    model.generation_config.pad_token_id = cfg.pad_token_id
    return model


def build_demo(corpus: Iterable[str], out_dir: str | Path | None = None, vocab_size: int = 384, **model_kw: Any) -> tuple[Any, Any]:
    """Tokenizer trained on ``corpus`` plus a fresh model; saved to ``out_dir`` (loadable by path) when given."""
    tok = train_tokenizer(corpus, vocab_size=vocab_size)
    model = build_model(tok, **model_kw)
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        tok.save_pretrained(out)
        model.save_pretrained(out)
    return model, tok
