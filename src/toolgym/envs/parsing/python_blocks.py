"""Tool-integrated reasoning: fenced ```python blocks are calls to the environment's python tool,
alone or as the fallback of a model's own call format."""

from __future__ import annotations

from typing import Any

from toolgym._text import PYTHON_TAGS, iter_fences
from toolgym.envs.parsing.base import MAX_CALLS_PER_TURN, Found, ParseError, ToolCall, ToolCallParser


class PythonBlockParser(ToolCallParser):
    """Each fenced ```python block is a call to the `python` tool."""

    name = "python"

    def __init__(self, tool_name: str = "python", max_calls: int = MAX_CALLS_PER_TURN) -> None:
        super().__init__(max_calls)
        self.tool_name = tool_name

    def find_calls(self, text: str) -> Found:
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

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        return f"```python\n{arguments.get('code', '')}\n```"


class CombinedParser(ToolCallParser):
    """A model's call format first (Hermes tags by default); fenced python blocks only when the
    message has no call in that format."""

    def __init__(self, tool_name: str = "python", max_calls: int = MAX_CALLS_PER_TURN,
                 primary: ToolCallParser | None = None) -> None:
        super().__init__(max_calls)
        if primary is None:
            from toolgym.envs.parsing.hermes import HermesParser

            primary = HermesParser(max_calls)
        self.primary = primary
        self._python = PythonBlockParser(tool_name, max_calls)
        self.name = f"{primary.name}+python"
        self.special_markers = primary.special_markers
        self.text_arguments = primary.text_arguments

    def find_calls(self, text: str) -> Found:
        calls, errors = self.primary.find_calls(text)
        if calls or errors:
            return calls, errors
        return self._python.find_calls(text)

    def answer_text(self, visible: str) -> str:
        return self.primary.answer_text(visible)

    def call_id(self, turn: int, index: int) -> str:
        return self.primary.call_id(turn, index)

    def error_id(self, turn: int, index: int) -> str:
        return self.primary.error_id(turn, index)

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        return self.primary.format_call(name, arguments)

    def with_format(self, fmt: ToolCallParser) -> ToolCallParser:
        if not self.primary.is_format:
            return self
        return CombinedParser(self._python.tool_name, self.max_calls, primary=fmt)
