"""Chat rendering that never re-tokenizes history.

The first prompt is the chat template's rendering of the env's messages (tool schemas included). Every
later prompt is built by APPENDING ids: the sampled ids verbatim, then the template's own tokens for the
end of the assistant turn, the new tool/user messages and the next assistant header. Those template
tokens come from rendering a small *delta*: a stand-in conversation whose assistant turn holds a
sentinel (and, before tool results, the calls those results answer), followed by the new messages; the
text after the stand-in turn is what the template adds. So templates that rewrite history (Qwen3 drops
earlier <think> blocks) cannot touch the training tokens, and tool results come out exactly as the
model's own template renders them after a tool-calling turn.

The template also decides the tool-call format (`tool_parser`): read from the template's markers
(`toolgym.envs.parsing.detect_parser`) unless a run names one.
"""

from __future__ import annotations

import json
from typing import Any

from toolgym.envs.parsing import ToolCallParser, detect_parser, get_format, get_parser
from toolgym.errors import ConfigError

_SENTINEL = "\u2063TOOLGYM_SENTINEL\u2063"


class ChatTemplate:
    """Token-level chat rendering around a transformers tokenizer with a chat template."""

    def __init__(self, tokenizer: Any, template_kwargs: dict[str, Any] | None = None,
                 tool_parser: str | ToolCallParser | None = None) -> None:
        """tool_parser: the model's tool-call format by name (see `toolgym.envs.parsing`); None reads it
        from the template, and Hermes tags where the template shows none."""
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
        detected = detect_parser(tokenizer.chat_template, getattr(tokenizer, "response_template", None))
        if tool_parser is not None:
            self.tool_parser, self.tool_parser_source = get_format(tool_parser), "override"
        elif detected is not None:
            self.tool_parser, self.tool_parser_source = get_format(detected), "template"
        else:
            self.tool_parser, self.tool_parser_source = get_format("hermes"), "default"
        self._decode_drop: set[int] | None = None

    # -- basic helpers ---------------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Tokenize template text (special-token markup is parsed, no BOS/EOS added)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def decode_turn(self, ids: list[int]) -> str:
        """A sampled turn as the environment reads it: special tokens dropped (end of turn, padding) but
        for the tool-call markers of the model's format, which tokenizers often mark special
        (Mistral's [TOOL_CALLS], Llama's <|python_tag|>, harmony's <|channel|> ...)."""
        if self._decode_drop is None:
            added = getattr(self.tokenizer, "added_tokens_decoder", None) or {}
            special = {i for i, t in added.items() if getattr(t, "special", False)}
            special |= set(getattr(self.tokenizer, "all_special_ids", None) or [])
            keep = set()
            for marker in self.tool_parser.special_markers:
                got = self.encode(marker)
                if len(got) == 1:
                    keep.add(got[0])
            self._decode_drop = special - keep
        return self.decode([i for i in ids if i not in self._decode_drop])

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
            messages = _tools_in_system(messages, tools, self.tool_parser)
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
        assistant header. Tool results are rendered after a stand-in turn that made their calls."""
        called = self._after_calls(new_messages)
        close_text, delta = called if called is not None else (self.turn_close_text, self.delta_text(new_messages))
        close = self.encode(close_text)
        k = 0
        for n in range(min(len(close), len(sampled_ids)), 0, -1):
            if sampled_ids[-n:] == close[:n]:
                k = n
                break
        return close[k:] + self.encode(delta)

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

    def _after_calls(self, new_messages: list[dict[str, Any]]) -> tuple[str, str] | None:
        """(close of a tool-calling turn, text for the tool results and the next header), rendered after a
        stand-in assistant turn that made one call per tool result (its name and id), as the model's own
        conversations run: gpt-oss names the function a result comes from, Mistral checks call ids. None
        when there are no tool results or the template refuses such a turn (Llama 3.1 takes one call per
        turn): the caller then renders after a plain turn."""
        results = [m for m in new_messages if m.get("role") == "tool"]
        if not results:
            return None
        calls = [{"id": m.get("tool_call_id") or f"call{i}", "type": "function",
                  "function": {"name": m.get("name") or "tool", "arguments": {}}} for i, m in enumerate(results)]
        turn = {"role": "assistant", "content": _SENTINEL, "tool_calls": calls}
        base = [{"role": "user", "content": "q"}, turn]
        try:
            head = self.render_text(base, add_generation_prompt=False)
            full = self.render_text(base + list(new_messages), add_generation_prompt=True)
        except Exception:  # the template's own raise_exception, or a missing field it needs
            return None
        if not full.startswith(head) or len(full) == len(head):
            return None
        header = self.render_text(base[:1], add_generation_prompt=True)
        at = head.find(_SENTINEL)
        if at >= 0:
            tail = head[at + len(_SENTINEL) :]
        elif head.startswith(header):  # a template that prints no content beside calls (Llama 3.1)
            tail = head[len(header) :]
        else:
            return None
        return _turn_close(tail, self.turn_close_text, self._stop_texts()), full[len(head) :]

    def _stop_texts(self) -> list[str]:
        """Texts that end a turn: the tokenizer's end-of-sequence token and the format's end markers."""
        stops = [t for t in (getattr(self.tokenizer, "eos_token", None),) if isinstance(t, str) and t]
        stops += [m for m in ("<|call|>", "<|eom_id|>", "<|eot_id|>", "<|im_end|>", "</s>", "<|end|>")
                  if m in self.tool_parser.special_markers or m in self.turn_close_text]
        return stops

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


def _turn_close(tail: str, plain_close: str, stops: list[str]) -> str:
    """The closing markup at the end of a rendered tool-calling turn: the plain turn's close when the turn
    ends with it, else the text from the last end-of-turn marker on (gpt-oss ends a call with <|call|>)."""
    if plain_close and tail.endswith(plain_close):
        return plain_close
    best = -1
    for stop in stops:
        best = max(best, tail.rfind(stop))
    return tail[best:] if best >= 0 else ""


def _tools_in_system(messages: list[dict[str, Any]], tools: list[dict],
                     parser: ToolCallParser | None = None) -> list[dict[str, Any]]:
    """For templates without tool support: describe the tools in the system message, with an example call
    written in the format the run parses (Hermes tags unless the run names another)."""
    schema = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    try:
        example = (parser or get_parser("hermes")).format_call("NAME", {"ARG": "VALUE"})
    except ConfigError:
        example = get_parser("hermes").format_call("NAME", {"ARG": "VALUE"})
    block = (
        "You may call tools. Their signatures, inside <tools></tools>:\n<tools>\n" + schema + "\n</tools>\n"
        "To call one, write:\n" + example
    )
    messages = [dict(m) for m in messages]
    if messages and messages[0].get("role") == "system":
        messages[0]["content"] = (messages[0].get("content") or "") + "\n\n" + block
    else:
        messages.insert(0, {"role": "system", "content": block})
    return messages
