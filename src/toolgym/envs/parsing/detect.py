"""Which tool-call format a model writes, read from its tokenizer's chat template (or, where
transformers 5 gives the tokenizer one, its response template): the markers each family's
template prints for a call. Pure string checks, no tokenizer import."""

from __future__ import annotations

import json
from typing import Any

# (parser, markers that must all appear), most specific first: Qwen3-Coder templates also print
# <tool_call>, and Llama templates name <|python_tag|> for their built-in tools.
SIGNATURES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gpt_oss", ("<|channel|>", "<|call|>")),
    ("deepseek_v3", ("<｜tool▁calls▁begin｜>",)),
    ("mistral", ("[TOOL_CALLS]",)),
    ("qwen3_coder", ("<function=", "<parameter=")),
    ("hermes", ("<tool_call>",)),
    ("pythonic", ("[func_name1(",)),
    ("pythonic", ("<|python_start|>",)),
    ("llama3_json", ("<|python_tag|>",)),
    ("llama3_json", ("<|start_header_id|>", "ipython")),
)


def detect_parser(chat_template: Any, response_template: Any = None) -> str | None:
    """The parser name for a model's templates, or None when neither shows a known call format.

    chat_template: the template source (a string, or transformers' dict of named templates).
    response_template: transformers 5's parsing spec for the model's output, checked first.
    """
    for source in (response_template, chat_template):
        text = _text(source)
        if not text:
            continue
        for name, markers in SIGNATURES:
            if all(m in text for m in markers):
                return name
    return None


def _text(source: Any) -> str:
    if source is None:
        return ""
    if isinstance(source, str):
        return source
    if isinstance(source, dict):
        return "\n".join(_text(v) for v in source.values())
    try:
        return json.dumps(source, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(source)
