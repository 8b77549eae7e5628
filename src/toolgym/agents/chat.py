"""Chat rendering that never re-tokenizes history.

The first prompt is the chat template's rendering of the env's messages (tool schemas included). Every
later prompt is built by APPENDING ids: the sampled ids verbatim, then the template's own tokens for the
end of the assistant turn, the new tool/user messages and the next assistant header. Those template
tokens come from rendering a small *delta*: a stand-in conversation whose assistant turn holds a
sentinel, followed by the new messages; the text after the sentinel's turn is what the template adds.
So templates that rewrite history (Qwen3 drops earlier <think> blocks) cannot touch the training tokens.
"""

from __future__ import annotations

import json
from typing import Any

from toolgym.errors import ConfigError

_SENTINEL = "\u2063TOOLGYM_SENTINEL\u2063"


class ChatTemplate:
    """Token-level chat rendering around a transformers tokenizer with a chat template."""

    def __init__(self, tokenizer: Any, template_kwargs: dict[str, Any] | None = None) -> None:
        if isinstance(tokenizer, str):
            from transformers import AutoTokenizer

            from toolgym._assets.names import load_error
            from toolgym.assets import resolve_model

            name = tokenizer
            try:
                tokenizer = AutoTokenizer.from_pretrained(resolve_model(name, "tokenizer"))
            except (OSError, ValueError) as exc:
                raise load_error(name, "tokenizer", exc) from None
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError("the tokenizer has no chat_template; set tokenizer.chat_template or pick a chat model")
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        self.turn_close_text = self._turn_close_text()
        self.turn_close_ids = self.encode(self.turn_close_text)
        self._renders_tools: bool | None = None

    # -- basic helpers ---------------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Tokenize template text (special-token markup is parsed, no BOS/EOS added)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def render_text(self, messages: list[dict[str, Any]], tools: list[dict] | None = None,
                    add_generation_prompt: bool = False) -> str:
        kwargs = dict(self.template_kwargs)
        if tools:
            kwargs["tools"] = tools
        return self.tokenizer.apply_chat_template(
            _plain(messages), tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
        )

    # -- prompts -----------------------------------------------------------------------------------------

    def prompt_ids(self, messages: list[dict[str, Any]], tools: list[dict] | None = None) -> list[int]:
        """Ids of the first prompt: the messages, tool schemas, and the assistant header."""
        if tools and not self.renders_tools():
            messages = _tools_in_system(messages, tools)
            tools = None
        return self.encode(self.render_text(messages, tools, add_generation_prompt=True))

    def renders_tools(self) -> bool:
        """Whether the template prints tool schemas itself (SmolLM2's does not: we add them to the system turn)."""
        if self._renders_tools is None:
            probe = [{"role": "user", "content": "x"}]
            tool = {"type": "function", "function": {"name": "toolgym_probe_fn", "description": "d",
                                                     "parameters": {"type": "object", "properties": {}}}}
            try:
                self._renders_tools = "toolgym_probe_fn" in self.render_text(probe, [tool])
            except Exception:  # some templates raise on unknown kwargs
                self._renders_tools = False
        return self._renders_tools

    def continuation_ids(self, sampled_ids: list[int], new_messages: list[dict[str, Any]]) -> list[int]:
        """Template ids to append after a sampled assistant turn: the rest of the turn's closing markup
        (all of it when the model stopped without its end-of-turn token), the new messages, and the next
        assistant header."""
        close = self.turn_close_ids
        k = 0
        for n in range(min(len(close), len(sampled_ids)), 0, -1):
            if sampled_ids[-n:] == close[:n]:
                k = n
                break
        return close[k:] + self.encode(self.delta_text(new_messages))

    def delta_text(self, new_messages: list[dict[str, Any]]) -> str:
        """What the template prints for `new_messages` plus the next assistant header, after a closed turn."""
        base = [{"role": "user", "content": "q"}, {"role": "assistant", "content": _SENTINEL}]
        full = self.render_text(base + list(new_messages), add_generation_prompt=True)
        at = full.find(_SENTINEL)
        if at < 0:
            raise ConfigError("chat template dropped the assistant turn; cannot build multi-turn prompts with it")
        rest = full[at + len(_SENTINEL) :]
        if not rest.startswith(self.turn_close_text):
            raise ConfigError("chat template closes assistant turns inconsistently; cannot append turns safely")
        return rest[len(self.turn_close_text) :]

    def _turn_close_text(self) -> str:
        base = [{"role": "user", "content": "q"}, {"role": "assistant", "content": _SENTINEL}]
        text = self.render_text(base, add_generation_prompt=False)
        at = text.find(_SENTINEL)
        if at < 0:
            raise ConfigError("chat template does not render assistant messages")
        return text[at + len(_SENTINEL) :]


def _plain(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as the template expects them (tool-call arguments as dicts, content always a string)."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("content") is None:
            m["content"] = ""
        out.append(m)
    return out


def _tools_in_system(messages: list[dict[str, Any]], tools: list[dict]) -> list[dict[str, Any]]:
    """For templates without tool support: describe the tools (Hermes style) in the system message."""
    schema = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    block = (
        "You may call tools. Their signatures, inside <tools></tools>:\n<tools>\n" + schema + "\n</tools>\n"
        'To call one, write <tool_call>{"name": NAME, "arguments": {...}}</tool_call>.'
    )
    messages = [dict(m) for m in messages]
    if messages and messages[0].get("role") == "system":
        messages[0]["content"] = (messages[0].get("content") or "") + "\n\n" + block
    else:
        messages.insert(0, {"role": "system", "content": block})
    return messages
