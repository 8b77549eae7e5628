"""Llama 3.x JSON tool calls: `{"name": ..., "parameters": {...}}` objects, optionally after
`<|python_tag|>`, several separated by `;` (or anything else)."""

from __future__ import annotations

import json
from typing import Any

from toolgym.envs.parsing.base import (
    Found,
    ParseError,
    ToolCall,
    ToolCallParser,
    json_at,
    object_arguments,
    short,
)


class Llama3JsonParser(ToolCallParser):
    """Llama 3.1/3.2/3.3 (and Llama 4 in JSON mode).

    Without `<|python_tag|>` a message is a tool call only when it holds a JSON object with "name"
    and "parameters" (or "arguments"); other JSON, or text with braces, is ordinary content, so an
    answer like `{x | x > 0}` is scored, not refused. After the tag, or once the message opens with
    `{"name"`, a broken object is a parse error the model reads.
    """

    name = "llama3_json"
    is_format = True
    TAG = "<|python_tag|>"
    special_markers = (TAG,)

    def find_calls(self, text: str) -> Found:
        tag = text.find(self.TAG)
        region = text[tag + len(self.TAG) :] if tag != -1 else text
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        pos = region.find("{")
        if pos == -1:
            if tag != -1 and region.strip():
                errors.append(ParseError(f"after <|python_tag|> write a JSON object "
                                         f'{{"name": ..., "parameters": {{...}}}}; got: {short(region.strip())}'))
            return calls, errors
        while pos != -1 and len(calls) + len(errors) <= self.max_calls:
            meant = tag != -1 or bool(calls or errors) or _opens_call(region, pos)
            got = json_at(region, pos)
            if got is None:
                if meant:
                    errors.append(ParseError(f"invalid JSON in tool call; got: {short(region[pos:])}"))
                break  # a brace in prose, or a broken call: nothing after it is read as a call
            obj, end = got
            call, err = _decode(obj)
            if call is not None:
                calls.append(call)
            elif meant:
                errors.append(ParseError(err))
            else:  # JSON that is no tool call (a dict in code, an answer): content, as vLLM's llama3_json reads it
                return [], []
            pos = region.find("{", end)
        return calls, errors

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        return json.dumps({"name": name, "parameters": arguments}, ensure_ascii=False)


def _opens_call(text: str, pos: int) -> bool:
    """The message starts with `{"name"`: the model meant a call even if the JSON is broken."""
    if text[:pos].strip():
        return False
    return text[pos + 1 : pos + 64].lstrip().startswith('"name"')


def _decode(obj: Any) -> tuple[ToolCall | None, str]:
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None, 'a tool call needs a string field "name"'
    if "parameters" in obj:
        raw = obj["parameters"]
    elif "arguments" in obj:
        raw = obj["arguments"]
    else:
        return None, f'tool {name!r}: the call needs "parameters" (a JSON object, {{}} for none)'
    args, err = object_arguments(name, raw, '"parameters"')
    return (ToolCall(name=name, arguments=args), "") if args is not None else (None, err)
