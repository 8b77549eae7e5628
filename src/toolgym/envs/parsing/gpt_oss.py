"""gpt-oss (OpenAI harmony): messages `<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>json]<|message|>BODY`
ended by `<|end|>`, `<|call|>` or `<|return|>`; a message to `functions.NAME` is a call with JSON arguments,
the `final` channel is the answer."""

from __future__ import annotations

import json
from typing import Any

from toolgym.envs.parsing.base import (
    Found,
    ParseError,
    ToolCall,
    ToolCallParser,
    json_error,
    object_arguments,
    short,
)

START, END, MESSAGE, CHANNEL, CONSTRAIN, CALL, RETURN = (
    "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|call|>", "<|return|>")
_STOPS = (END, CALL, RETURN, START)


def harmony_messages(text: str) -> list[tuple[str, str | None, str]]:
    """(channel, recipient, body) of each harmony message in `text`, in one pass: every marker's next
    position is searched once per advance, so a long text of markers costs a linear scan."""
    out: list[tuple[str, str | None, str]] = []
    nxt: dict[str, int] = {}

    def find(marker: str, pos: int) -> int:
        at = nxt.get(marker, -2)
        if at == -1 or (at >= pos):
            return at
        at = text.find(marker, pos)
        nxt[marker] = at
        return at

    pos = 0
    while True:
        m = find(MESSAGE, pos)
        if m == -1:
            break
        header = text[pos:m]
        if START in header:
            header = header[header.rfind(START) + len(START) :]
        body_start = m + len(MESSAGE)
        ends = [(at, mk) for mk in _STOPS if (at := find(mk, body_start)) != -1]
        end, mark = min(ends) if ends else (len(text), "")
        out.append((*_header(header), text[body_start:end]))
        pos = end + (len(mark) if mark != START else 0)
    return out


def _header(header: str) -> tuple[str, str | None]:
    """(channel, recipient) of `assistant to=functions.f<|channel|>commentary <|constrain|>json`-like headers."""
    recipient = None
    at = header.find("to=")
    if at != -1:
        rest = header[at + 3 :]
        cut = len(rest)
        for stop in (" ", "\n", "\t", "<|"):
            i = rest.find(stop)
            if i != -1:
                cut = min(cut, i)
        recipient = rest[:cut] or None
    channel = ""
    c = header.find(CHANNEL)
    if c != -1:
        rest = header[c + len(CHANNEL) :].lstrip()
        cut = len(rest)
        for stop in (" ", "\n", "\t", "<|"):
            i = rest.find(stop)
            if i != -1:
                cut = min(cut, i)
        channel = rest[:cut]
    return channel, recipient


class GptOssParser(ToolCallParser):
    """Harmony's commentary messages to `functions.NAME`. A message to any other recipient (a built-in
    tool such as `browser.search`) is an error the model reads: environments serve functions only."""

    name = "gpt_oss"
    is_format = True
    special_markers = (START, END, MESSAGE, CHANNEL, CONSTRAIN, CALL, RETURN)

    def find_calls(self, text: str) -> Found:
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        for _channel, recipient, body in harmony_messages(text):
            if recipient is None:
                continue
            if len(calls) + len(errors) > self.max_calls:
                break
            if not recipient.startswith("functions.") or recipient == "functions.":
                errors.append(ParseError(f"unknown recipient {recipient!r}: call tools as functions.NAME"))
                continue
            name = recipient[len("functions.") :]
            raw = body.strip()
            try:
                obj: Any = json.loads(raw) if raw else {}
            except (ValueError, RecursionError):
                errors.append(ParseError(f"tool {name!r}: invalid JSON arguments ({json_error(raw)}); got: {short(raw)}"))
                continue
            args, err = object_arguments(name, obj, "the arguments")
            if args is None:
                errors.append(ParseError(err))
            else:
                calls.append(ToolCall(name=name, arguments=args))
        return calls, errors

    def answer_text(self, visible: str) -> str:
        msgs = harmony_messages(visible)
        if not msgs:
            return visible
        return "\n".join(body for channel, recipient, body in msgs if channel == "final" and recipient is None)

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        return (f"{CHANNEL}commentary to=functions.{name} {CONSTRAIN}json{MESSAGE}"
                f"{json.dumps(arguments, ensure_ascii=False)}{CALL}")
