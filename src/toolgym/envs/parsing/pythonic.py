"""Pythonic tool calls (Llama 3.2/4, Olmo): the whole message is a Python list of calls with literal
keyword arguments, `[get_weather(city="Paris"), add(a=1, b=2)]`.

Read with Python's own parser (`ast`, never evaluated): only literals become arguments."""

from __future__ import annotations

import ast
from typing import Any

from toolgym.envs.parsing.base import Found, ParseError, ToolCall, ToolCallParser, short

_NAMES = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


class _NotLiteral(ValueError):
    pass


class PythonicParser(ToolCallParser):
    """The message (after `<|python_tag|>` or inside `<|python_start|>...<|python_end|>`) is `[call, ...]`;
    anything else is content. A list that starts like calls but is not valid Python is a parse error."""

    name = "pythonic"
    is_format = True
    special_markers = ("<|python_tag|>", "<|python_start|>", "<|python_end|>")

    def find_calls(self, text: str) -> Found:
        s = text.strip()
        for mark in ("<|python_tag|>", "<|python_start|>"):
            if s.startswith(mark):
                s = s[len(mark) :].strip()
        if s.endswith("<|python_end|>"):
            s = s[: -len("<|python_end|>")].strip()
        if not s.startswith("["):
            return [], []
        meant = _opens_call(s)
        if not s.endswith("]"):
            return ([], [ParseError(f"a tool call list must end with ']' and nothing may follow it; got: {short(s)}")]
                    if meant else [])
        try:
            tree = ast.parse(s, mode="eval").body
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            msg = getattr(exc, "msg", None) or str(exc) or type(exc).__name__
            return [], ([ParseError(f"invalid Python in the tool call list ({msg}); got: {short(s)}")] if meant else [])
        if not isinstance(tree, ast.List) or not tree.elts or not any(isinstance(e, ast.Call) for e in tree.elts):
            return [], []  # a list that holds no call ([1, 2, 3]) is an answer, not a call
        calls: list[ToolCall] = []
        errors: list[ParseError] = []
        for e in tree.elts:
            call, err = _call(e)
            if call is not None:
                calls.append(call)
            else:
                errors.append(ParseError(err))
        return calls, errors

    def format_call(self, name: str, arguments: dict[str, Any]) -> str:
        args = ", ".join(f"{k}={_py(v)}" for k, v in arguments.items())
        return f"[{name}({args})]"


def _opens_call(s: str) -> bool:
    """`[` then an identifier (dots allowed) then `(`: the model meant calls."""
    i, n = 1, len(s)
    while i < n and s[i] in " \t\n":
        i += 1
    j = i
    while j < n and (s[j].isalnum() or s[j] in "_."):
        j += 1
    return j > i and j < n and s[j] == "("


def _call(node: ast.expr) -> tuple[ToolCall | None, str]:
    if not isinstance(node, ast.Call):
        return None, "every element of the tool call list must be a call like name(arg=value)"
    parts: list[str] = []
    f: ast.expr = node.func
    while isinstance(f, ast.Attribute):
        parts.append(f.attr)
        f = f.value
    if not isinstance(f, ast.Name):
        return None, "a tool call needs a plain function name"
    name = ".".join([f.id, *reversed(parts)])
    if node.args:
        return None, f"tool {name!r}: pass arguments by keyword (name=value), not by position"
    args: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            return None, f"tool {name!r}: **kwargs cannot be passed to a tool; write each argument as name=value"
        try:
            args[kw.arg] = _literal(kw.value)
        except _NotLiteral:
            return None, f"tool {name!r}: argument {kw.arg!r} must be a literal (string, number, list, dict, ...)"
    return ToolCall(name=name, arguments=args), ""


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (str, int, float))):
        return node.value
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        out = {}
        for k, v in zip(node.keys, node.values, strict=True):
            if not (isinstance(k, ast.Constant) and isinstance(k.value, (str, int, float))):
                raise _NotLiteral
            out[k.value] = _literal(v)
        return out
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _literal(node.operand)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.JoinedStr) and all(isinstance(p, ast.Constant) for p in node.values):
        return "".join(str(p.value) for p in node.values)  # type: ignore[attr-defined]
    raise _NotLiteral


def _py(v: Any) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_py(k)}: {_py(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_py(x) for x in v) + "]"
    return repr(v)
