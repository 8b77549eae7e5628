"""DeepSeek V3 / R1: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME` then the
arguments in a ```json fence, `<｜tool▁call▁end｜>` after each call and `<｜tool▁calls▁end｜>` after all.
The V3.1 form (`NAME<｜tool▁sep｜>{...}`, no fence) is read too."""

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

CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL_BEGIN, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


class DeepSeekV3Parser(ToolCallParser):
    """Calls from the first `<｜tool▁calls▁begin｜>` on; each needs its `<｜tool▁call▁end｜>`."""

    name = "deepseek_v3"
    is_format = True
    special_markers = (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END, SEP)

    def find_calls(self, text: str) -> Found:
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        begin = text.find(CALLS_BEGIN)
        if begin == -1:
            return calls, errors
        pos, stop = begin + len(CALLS_BEGIN), len(text)  # calls after a first block's end are read too
        while len(calls) + len(errors) <= self.max_calls:
            start = text.find(CALL_BEGIN, pos, stop)
            if start == -1:
                break
            end = text.find(CALL_END, start, stop)
            if end == -1:
                errors.append(ParseError("unterminated tool call: end each call with <｜tool▁call▁end｜>"))
                break
            pos = end + len(CALL_END)
            call, err = _decode(text[start + len(CALL_BEGIN) : end])
            if call is not None:
                calls.append(call)
            else:
                errors.append(ParseError(err))
        if not calls and not errors:
            errors.append(ParseError("<｜tool▁calls▁begin｜> without a call: write <｜tool▁call▁begin｜>function"
                                     "<｜tool▁sep｜>NAME then the arguments in a ```json block"))
        return calls, errors

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        args = json.dumps(arguments, ensure_ascii=False)
        return f"{CALLS_BEGIN}{CALL_BEGIN}function{SEP}{name}\n```json\n{args}\n```{CALL_END}{CALLS_END}"


def _decode(body: str) -> tuple[ToolCall | None, str]:
    sep = body.find(SEP)
    if sep == -1:
        return None, f"a tool call needs <｜tool▁sep｜> between its type and name; got: {short(body)}"
    head, rest = body[:sep].strip(), body[sep + len(SEP) :]
    if rest.lstrip().startswith("{"):  # V3.1: NAME<｜tool▁sep｜>{...}
        name, raw = head, rest.strip()
    else:
        nl = rest.find("\n")
        name = (rest if nl == -1 else rest[:nl]).strip()
        raw = "" if nl == -1 else rest[nl + 1 :].strip()
        if raw.startswith("```"):
            first = raw.find("\n")
            raw = "" if first == -1 else raw[first + 1 :]
            raw = raw.rstrip()
            if raw.endswith("```"):
                raw = raw[:-3]
            raw = raw.strip()
    if not name or any(c.isspace() for c in name):
        return None, f"a tool call needs one tool name after <｜tool▁sep｜>; got: {short(name)}"
    got = json_at(raw, 0) if raw else ({}, 0)
    if got is None or raw[got[1] :].strip():
        return None, f"tool {name!r}: the arguments must be one JSON object in a ```json block; got: {short(raw)}"
    args, err = object_arguments(name, got[0], "the arguments")
    return (ToolCall(name=name, arguments=args), "") if args is not None else (None, err)
