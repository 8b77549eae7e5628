"""Tool-call parsing: turn one assistant message into tool calls, parse errors and a final answer.

Parsers are small classes chosen per environment or model. They scan with str.find (no
backtracking regexes over model text), so a megabyte of garbage costs one linear pass and
nothing a model writes can raise: problems come back as `ParseError`s for the model to read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from toolgym._text import PYTHON_TAGS, iter_fences
from toolgym.envs.answers import extract_answer

MAX_CALLS_PER_TURN = 8


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


def _short(s: str, n: int = 80) -> str:
    s = s.replace("\n", "\\n")
    return s if len(s) <= n else s[:n] + "..."


class ToolCallParser:
    """Base class: subclasses implement `find_calls`; the final answer comes from `extract_answer`."""

    name = "none"

    def __init__(self, max_calls: int = MAX_CALLS_PER_TURN) -> None:
        self.max_calls = max_calls

    def find_calls(self, text: str) -> tuple[list[ToolCall], list[ParseError]]:
        return [], []

    def parse(self, text: str, turn: int = 0) -> ParsedTurn:
        """Parse one assistant message; never raises on any string."""
        if not isinstance(text, str):
            return ParsedTurn(errors=[ParseError(f"expected the assistant message as text, got {type(text).__name__}")])
        visible = strip_thinking(text)
        calls, errors = self.find_calls(visible)
        if len(calls) > self.max_calls:
            errors.append(ParseError(f"too many tool calls in one turn ({len(calls)}); only the first {self.max_calls} ran"))
            calls = calls[: self.max_calls]
        for i, call in enumerate(calls):
            call.id = call.id or f"call_{turn}_{i}"
        for i, err in enumerate(errors):
            err.id = err.id or f"call_{turn}_err{i}"
        answer = None if calls else extract_answer(visible)
        return ParsedTurn(calls=calls, errors=errors, answer=answer)


class NoToolParser(ToolCallParser):
    """For environments without tools: only the final answer matters."""

    name = "none"


class HermesParser(ToolCallParser):
    """Hermes/Qwen style: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, several per turn."""

    name = "hermes"
    OPEN, CLOSE = "<tool_call>", "</tool_call>"

    def find_calls(self, text: str) -> tuple[list[ToolCall], list[ParseError]]:
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
            return None, f"invalid JSON in <tool_call> ({exc}); got: {_short(body)}"
        if not isinstance(obj, dict):
            return None, f"<tool_call> must hold a JSON object, got {type(obj).__name__}"
        name = obj.get("name")
        if not isinstance(name, str) or not name:
            return None, "<tool_call> JSON needs a string field \"name\""
        args = obj.get("arguments", obj.get("parameters", {}))
        if isinstance(args, str):  # some models double-encode the arguments
            try:
                args = json.loads(args) if args.strip() else {}
            except (ValueError, RecursionError):
                return None, f"tool {name!r}: \"arguments\" is a string that is not valid JSON"
        if args is None:
            args = {}
        if not isinstance(args, dict):
            return None, f"tool {name!r}: \"arguments\" must be a JSON object, got {type(args).__name__}"
        return ToolCall(name=name, arguments=args), ""


class PythonBlockParser(ToolCallParser):
    """Tool-integrated reasoning: each fenced ```python block is a call to the `python` tool."""

    name = "python"

    def __init__(self, tool_name: str = "python", max_calls: int = MAX_CALLS_PER_TURN) -> None:
        super().__init__(max_calls)
        self.tool_name = tool_name

    def find_calls(self, text: str) -> tuple[list[ToolCall], list[ParseError]]:
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        for fence in iter_fences(text):  # ```output blocks the model wrote itself are other tags: skipped
            if len(calls) > self.max_calls:
                break
            if fence.lang not in PYTHON_TAGS:
                continue
            if not fence.closed:
                errors.append(ParseError("unterminated ```python block: close the code with ```"))
            elif fence.body.strip():
                calls.append(ToolCall(name=self.tool_name, arguments={"code": fence.body}))
        return calls, errors


class CombinedParser(ToolCallParser):
    """Hermes tags first; fenced python blocks only when the message has no tags."""

    name = "hermes+python"

    def __init__(self, tool_name: str = "python", max_calls: int = MAX_CALLS_PER_TURN) -> None:
        super().__init__(max_calls)
        self._hermes = HermesParser(max_calls)
        self._python = PythonBlockParser(tool_name, max_calls)

    def find_calls(self, text: str) -> tuple[list[ToolCall], list[ParseError]]:
        calls, errors = self._hermes.find_calls(text)
        if calls or errors:
            return calls, errors
        return self._python.find_calls(text)


PARSERS: dict[str, type[ToolCallParser]] = {
    "none": NoToolParser,
    "hermes": HermesParser,
    "python": PythonBlockParser,
    "hermes+python": CombinedParser,
}


def get_parser(parser: str | ToolCallParser) -> ToolCallParser:
    """A parser instance from a name in PARSERS or an instance."""
    if isinstance(parser, ToolCallParser):
        return parser
    try:
        return PARSERS[parser]()
    except (KeyError, TypeError):
        from toolgym.errors import ConfigError

        raise ConfigError(f"unknown tool-call parser {parser!r}; choose one of {', '.join(PARSERS)}") from None
