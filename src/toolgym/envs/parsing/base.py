"""What every tool-call parser shares: the result types, the base class and small linear helpers.

A parser turns one assistant message into tool calls, parse errors and a final answer. Formats
differ only in `find_calls` (and `format_call`, the same call written back in that format); the
rest (thinking blocks, the call cap, ids, argument types from the tool's schema) lives here once.
Scans use str.find and json's raw_decode (no backtracking regexes), so a megabyte of garbage costs
a linear pass and nothing a model writes can raise: problems come back as `ParseError`s.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from toolgym.envs.answers import extract_answer

MAX_CALLS_PER_TURN = 8
# what a tool name may be (a Tool's own names are a subset); any other name is a malformed call, so no
# text a model picks as a name (a lone surrogate, control characters, megabytes) reaches the episode
TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_DECODER = json.JSONDecoder()


@dataclass
class ToolCall:
    """One requested tool invocation."""

    name: str
    arguments: dict[str, Any]
    id: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class ParseError:
    """A malformed call; `message` is what the model sees."""

    message: str
    id: str = ""


@dataclass
class ParsedTurn:
    """What one assistant message asked for."""

    calls: list[ToolCall] = field(default_factory=list)
    errors: list[ParseError] = field(default_factory=list)
    answer: str | None = None

    @property
    def has_tool_activity(self) -> bool:
        return bool(self.calls or self.errors)


Found = tuple[list[ToolCall], list[ParseError]]


def strip_thinking(text: str) -> str:
    """Drop reasoning the model did not mean as output: everything up to the last </think>.

    An opened but unclosed <think> block hides the rest of the message (the model ran out
    of budget mid-thought); calls written inside it are not executed.
    """
    end = text.rfind("</think>")
    if end != -1:
        return text[end + len("</think>") :]
    start = text.find("<think>")
    if start != -1:
        return text[:start]
    return text


def short(s: str, n: int = 80) -> str:
    """`s` on one line, cut to n characters: enough of the model's text to locate a problem."""
    s = s.replace("\n", "\\n")
    return s if len(s) <= n else s[:n] + "..."


def json_at(text: str, pos: int) -> tuple[Any, int] | None:
    """The JSON value starting at text[pos] and the index after it, or None when there is none."""
    try:
        return _DECODER.raw_decode(text, pos)
    except (ValueError, RecursionError):
        return None


def json_error(text: str) -> str:
    """Why `text` is not one JSON value (json's own message, which names the position)."""
    try:
        json.loads(text)
    except (ValueError, RecursionError) as exc:
        return str(exc) or type(exc).__name__
    return "not a JSON value"


def object_arguments(name: str, args: Any, where: str) -> tuple[dict[str, Any] | None, str]:
    """Arguments as a dict, or an error: a JSON string holding an object is decoded (some models
    double-encode), null is {}, anything else that is not an object is refused."""
    if isinstance(args, str):
        if not args.strip():
            return {}, ""
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):
            return None, f"tool {name!r}: {where} is a string that is not valid JSON"
    if args is None:
        return {}, ""
    if not isinstance(args, dict):
        return None, f"tool {name!r}: {where} must be a JSON object, got {type(args).__name__}"
    return args, ""


def coerce_arguments(args: dict[str, Any], parameters: Any) -> dict[str, Any]:
    """Text-valued arguments (XML formats write every value as text) typed by the tool's JSON schema:
    "3" becomes 3 for an integer parameter and stays "3" for a string one; what does not convert stays text."""
    props = parameters.get("properties") if isinstance(parameters, dict) else None
    if not isinstance(props, dict):
        return args
    out = dict(args)
    for key, value in args.items():
        schema = props.get(key)
        if isinstance(value, str) and isinstance(schema, dict):
            out[key] = _coerce(value, _schema_types(schema))
    return out


def _schema_types(schema: dict[str, Any]) -> list[str]:
    t = schema.get("type")
    types = [t] if isinstance(t, str) else [x for x in t if isinstance(x, str)] if isinstance(t, list) else []
    for key in ("anyOf", "oneOf"):
        for sub in schema.get(key) or []:
            if isinstance(sub, dict):
                types += _schema_types(sub)
    return types


def _coerce(raw: str, types: list[str]) -> Any:
    if "string" in types or not types:
        return raw
    text = raw.strip()
    for t in ("null", "integer", "number", "boolean", "object", "array"):
        if t not in types:
            continue
        if t == "null" and text.lower() in ("null", "none"):
            return None
        if t == "integer":
            try:
                return int(text)
            except ValueError:
                continue
        if t == "number":
            try:
                x = float(text)
            except ValueError:
                continue
            if math.isfinite(x):
                return int(x) if x.is_integer() and "." not in text and "e" not in text.lower() else x
        if t == "boolean" and text.lower() in ("true", "false"):
            return text.lower() == "true"
        if t in ("object", "array"):
            got = json_at(text, 0)
            if got is not None and got[1] == len(text) and isinstance(got[0], dict if t == "object" else list):
                return got[0]
    return raw


class ToolCallParser:
    """Base class: subclasses implement `find_calls` (and `format_call`); the answer comes from `extract_answer`.

    Class attributes a format sets:
      special_markers: marker strings that tokenizers often mark special (decoding must keep them).
      text_arguments: argument values are written as text and typed by the tool's schema.
      is_format: a model's tool-call format, so an environment's parser may be replaced by the model's.
    """

    name = "none"
    special_markers: tuple[str, ...] = ()
    text_arguments = False
    is_format = False

    def __init__(self, max_calls: int = MAX_CALLS_PER_TURN) -> None:
        self.max_calls = max_calls

    def find_calls(self, text: str) -> Found:
        return [], []

    def answer_text(self, visible: str) -> str:
        """The part of the message a final answer is read from (harmony: its final channel)."""
        return visible

    def call_id(self, turn: int, index: int) -> str:
        return f"call_{turn}_{index}"

    def error_id(self, turn: int, index: int) -> str:
        return f"call_{turn}_err{index}"

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        """One call written the way this format's models write it (examples, probes, round trips)."""
        from toolgym.errors import ConfigError

        raise ConfigError(f"the {self.name!r} parser reads no tool calls, so it cannot write one")

    def with_format(self, fmt: ToolCallParser) -> ToolCallParser:
        """This parser with its call format replaced by a model's: a format parser becomes `fmt`;
        parsers that read something else (fenced blocks, nothing, a custom format) stay as they are."""
        return fmt if self.is_format else self

    def parse(self, text: str, turn: int = 0, tools: list[dict[str, Any]] | None = None) -> ParsedTurn:
        """Parse one assistant message; never raises on any string. `tools` (OpenAI-style schemas)
        type the arguments of formats that write them as text."""
        if not isinstance(text, str):
            return ParsedTurn(errors=[ParseError(f"expected the assistant message as text, got {type(text).__name__}")])
        visible = strip_thinking(text)
        try:
            calls, errors = self.find_calls(visible)
        except RecursionError:  # a parser's own bound failed: still an answer for the model, never a crash
            calls, errors = [], [ParseError("the tool call is nested too deeply to read")]
        named: list[ToolCall] = []
        for call in calls:
            if isinstance(call.name, str) and TOOL_NAME.fullmatch(call.name):
                named.append(call)
            else:
                errors.append(ParseError(f"invalid tool name {ascii(call.name)[:80]}: "
                                         "a tool name is 1 to 64 of A-Z a-z 0-9 _ . -"))
        calls = named
        if len(calls) > self.max_calls:
            errors.append(ParseError(f"too many tool calls in one turn ({len(calls)}); only the first {self.max_calls} ran"))
            calls = calls[: self.max_calls]
        if self.text_arguments and tools:
            params = {t.get("function", {}).get("name"): t.get("function", {}).get("parameters")
                      for t in tools if isinstance(t, dict)}
            for call in calls:
                call.arguments = coerce_arguments(call.arguments, params.get(call.name))
        for i, call in enumerate(calls):
            call.id = call.id or self.call_id(turn, i)
        for i, err in enumerate(errors):
            err.id = err.id or self.error_id(turn, i)
        answer = None if calls else extract_answer(self.answer_text(visible))
        return ParsedTurn(calls=calls, errors=errors, answer=answer)


class NoToolParser(ToolCallParser):
    """For environments without tools: only the final answer matters."""

    name = "none"
