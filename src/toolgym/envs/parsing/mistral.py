"""Mistral: `[TOOL_CALLS]` then either a JSON list `[{"name": ..., "arguments": {...}}, ...]` (tokenizers
before v11) or one `name[ARGS]{...}` per marker (v11 and later; `name{...}` also read)."""

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


class MistralParser(ToolCallParser):
    """Both generations in one parser: the form is read from the text, not from the tokenizer's version.
    Call ids are 9 letters and digits, the only ids Mistral's chat templates accept."""

    name = "mistral"
    is_format = True
    TOOL_CALLS, ARGS, CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
    special_markers = (TOOL_CALLS, ARGS, CALL_ID)

    def call_id(self, turn: int, index: int) -> str:
        return f"c{turn % 10000:04d}n{index % 1000:03d}"

    def error_id(self, turn: int, index: int) -> str:
        return f"e{turn % 10000:04d}n{index % 1000:03d}"

    def find_calls(self, text: str) -> Found:
        first = text.find(self.TOOL_CALLS)
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        if first == -1:
            return calls, errors
        for segment in text[first + len(self.TOOL_CALLS) :].split(self.TOOL_CALLS):
            if len(calls) + len(errors) > self.max_calls:
                break
            body = segment.strip()
            if not body:
                continue  # repeated markers count as one
            if body[0] in "[{":
                self._json_list(body, calls, errors)
            else:
                call, err = self._named(body)
                if call is not None:
                    calls.append(call)
                else:
                    errors.append(ParseError(err))
        if not calls and not errors:
            errors.append(ParseError("[TOOL_CALLS] without a call: write [TOOL_CALLS]name[ARGS]{...}"))
        return calls, errors

    @staticmethod
    def _json_list(body: str, calls: list[ToolCall], errors: list[ParseError]) -> None:
        got = json_at(body, 0)
        if got is None:
            errors.append(ParseError(f"invalid JSON after [TOOL_CALLS]; got: {short(body)}"))
            return
        items = got[0] if isinstance(got[0], list) else [got[0]]
        for item in items:
            name = item.get("name") if isinstance(item, dict) else None
            if not isinstance(name, str) or not name:
                errors.append(ParseError('each call after [TOOL_CALLS] needs a string field "name"'))
                continue
            args, err = object_arguments(name, item.get("arguments"), '"arguments"')
            if args is None:
                errors.append(ParseError(err))
            else:
                calls.append(ToolCall(name=name, arguments=args))

    def _named(self, body: str) -> tuple[ToolCall | None, str]:
        at = body.find(self.ARGS)
        if at != -1:
            head, rest = body[:at], body[at + len(self.ARGS) :]
        else:
            brace = body.find("{")
            if brace == -1:
                return None, f"expected [TOOL_CALLS]name[ARGS]{{...}}; got: {short(body)}"
            head, rest = body[:brace], body[brace:]
        cid = head.find(self.CALL_ID)
        name = (head[:cid] if cid != -1 else head).strip()
        if not name or any(c.isspace() for c in name):
            return None, f"a tool name after [TOOL_CALLS] must be one word; got: {short(name)}"
        rest = rest.lstrip()
        got = json_at(rest, 0)
        if got is None:
            return None, f"tool {name!r}: invalid JSON arguments after [ARGS]; got: {short(rest)}"
        args, err = object_arguments(name, got[0], "the arguments")
        return (ToolCall(name=name, arguments=args), "") if args is not None else (None, err)

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        return f"{self.TOOL_CALLS}{name}{self.ARGS}{json.dumps(arguments, ensure_ascii=False)}"
