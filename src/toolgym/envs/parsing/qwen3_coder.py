"""Qwen3-Coder XML: `<tool_call><function=NAME><parameter=KEY>VALUE</parameter>...</function></tool_call>`.

Values are text; `ToolCallParser.parse` types them by the tool's schema ("3" -> 3 for an integer)."""

from __future__ import annotations

import json
from typing import Any

from toolgym.envs.parsing.base import Found, ParseError, ToolCall, ToolCallParser, short


class Qwen3CoderParser(ToolCallParser):
    """Qwen3-Coder (and Qwen3.5-style XML calls); `<function=...>` is read with or without `<tool_call>`."""

    name = "qwen3_coder"
    is_format = True
    text_arguments = True
    special_markers = ("<tool_call>", "</tool_call>")
    FUNC, FUNC_END, PARAM, PARAM_END = "<function=", "</function>", "<parameter=", "</parameter>"

    def find_calls(self, text: str) -> Found:
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        pos = 0
        while len(calls) + len(errors) <= self.max_calls:
            start = text.find(self.FUNC, pos)
            if start == -1:
                break
            head_end = text.find(">", start)
            nl = text.find("\n", start)
            if head_end == -1 or (nl != -1 and nl < head_end):
                errors.append(ParseError(f"<function=NAME> must close with '>' on its line; got: {short(text[start:])}"))
                pos = start + len(self.FUNC)
                continue
            name = text[start + len(self.FUNC) : head_end].strip()
            body_start = head_end + 1
            end = text.find(self.FUNC_END, body_start)
            nxt = text.find(self.FUNC, body_start)
            if end == -1 or (nxt != -1 and nxt < end):
                close = text.find("</tool_call>", body_start)
                if close == -1 or (nxt != -1 and nxt < close):
                    errors.append(ParseError(f"unterminated <function={short(name, 40)}>: close it with </function>"))
                    pos = body_start
                    continue
                end, pos = close, close
            else:
                pos = end + len(self.FUNC_END)
            if not name or "<" in name:
                errors.append(ParseError(f"<function=NAME> needs a tool name; got: {short(name)}"))
                continue
            calls.append(ToolCall(name=name, arguments=self._params(text[body_start:end])))
        if not calls and not errors and text.find("<tool_call>") != -1:
            errors.append(ParseError("<tool_call> without <function=NAME>: write <function=NAME><parameter=KEY>"
                                     "VALUE</parameter></function> inside it"))
        return calls, errors

    def _params(self, body: str) -> dict[str, Any]:
        args: dict[str, Any] = {}
        pos = body.find(self.PARAM)
        while pos != -1:
            head_end = body.find(">", pos)
            if head_end == -1:
                break
            key = body[pos + len(self.PARAM) : head_end].strip()
            value_start = head_end + 1
            end = body.find(self.PARAM_END, value_start)
            nxt = body.find(self.PARAM, value_start)
            if end == -1 or (nxt != -1 and nxt < end):  # an unclosed value runs to the next parameter
                end = nxt if nxt != -1 else len(body)
                pos = nxt
            else:
                pos = body.find(self.PARAM, end + len(self.PARAM_END))
            if key:
                args[key] = _trim_newline(body[value_start:end])
        return args

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        params = "".join(f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}\n</parameter>\n"
                         for k, v in arguments.items())
        return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def _trim_newline(value: str) -> str:
    """The template writes one newline around each value: drop exactly those."""
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value
