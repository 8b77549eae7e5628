"""Hermes / Qwen: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, several per turn."""

from __future__ import annotations

import json
from typing import Any

from toolgym.envs.parsing.base import Found, ParseError, ToolCall, ToolCallParser, object_arguments, short


class HermesParser(ToolCallParser):
    """Hermes 2 Pro, Qwen2.5, Qwen3 (and the tool block toolgym adds for templates without tools)."""

    name = "hermes"
    is_format = True
    OPEN, CLOSE = "<tool_call>", "</tool_call>"
    special_markers = (OPEN, CLOSE)

    def find_calls(self, text: str) -> Found:
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        pos = 0
        while len(calls) + len(errors) <= self.max_calls:
            start = text.find(self.OPEN, pos)
            stray = text.find(self.CLOSE, pos)
            if start == -1:
                if stray != -1:
                    errors.append(ParseError("found </tool_call> without a matching <tool_call>"))
                break
            if stray != -1 and stray < start:
                errors.append(ParseError("found </tool_call> without a matching <tool_call>"))
            body_start = start + len(self.OPEN)
            end = text.find(self.CLOSE, body_start)
            if end == -1:
                errors.append(ParseError("unterminated <tool_call>: close each call with </tool_call>"))
                break
            body = text[body_start:end]
            pos = end + len(self.CLOSE)
            if self.OPEN in body:
                errors.append(ParseError("nested <tool_call> tags: write one JSON object per <tool_call>...</tool_call>"))
                continue
            call, err = self._decode(body)
            if call is not None:
                calls.append(call)
            else:
                errors.append(ParseError(err))
        return calls, errors

    @staticmethod
    def _decode(body: str) -> tuple[ToolCall | None, str]:
        body = body.strip()
        if not body:
            return None, "empty <tool_call>: expected a JSON object with \"name\" and \"arguments\""
        try:
            obj = json.loads(body)
        except (ValueError, RecursionError) as exc:
            return None, f"invalid JSON in <tool_call> ({exc}); got: {short(body)}"
        if not isinstance(obj, dict):
            return None, f"<tool_call> must hold a JSON object, got {type(obj).__name__}"
        name = obj.get("name")
        if not isinstance(name, str) or not name:
            return None, "<tool_call> JSON needs a string field \"name\""
        args, err = object_arguments(name, obj.get("arguments", obj.get("parameters", {})), '"arguments"')
        if args is None:
            return None, err
        return ToolCall(name=name, arguments=args), ""

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n</tool_call>"
