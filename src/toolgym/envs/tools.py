"""Tools: the `@tool` decorator builds an OpenAI/Hermes function schema from a plain function's
signature, type hints and docstring; `Tool.acall` validates arguments and turns every failure
into text for the model, never an exception.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin

from toolgym.errors import ConfigError, InfrastructureError

MAX_TOOL_OUTPUT_CHARS = 4000


class ToolSchemaError(ConfigError):
    """A tool's signature or schema cannot be described as a JSON-Schema function tool."""


@dataclass
class ToolContext:
    """What a tool may use besides its arguments: the sandbox, the current task, per-episode state."""

    sandbox: Any = None
    task: Any = None
    state: dict[str, Any] = field(default_factory=dict)
    env: Any = None

    async def get_sandbox(self) -> Any:
        if self.env is not None:
            return await self.env.aget_sandbox()
        if self.sandbox is None:
            raise RuntimeError("this tool needs a sandbox and none was given")
        return self.sandbox


def _type_schema(tp: Any, where: str) -> dict[str, Any]:
    if tp is inspect.Parameter.empty or tp is Any:
        return {}
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return _type_schema(args[0], where)
        return {"anyOf": [_type_schema(a, where) for a in args]}
    if origin is Literal:
        vals = list(get_args(tp))
        return {"enum": vals}
    if tp is str:
        return {"type": "string"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp in (list, tuple) or origin in (list, tuple, typing.Sequence):
        args = get_args(tp)
        out: dict[str, Any] = {"type": "array"}
        if args and args[-1] is not Ellipsis:
            out["items"] = _type_schema(args[0], where)
        elif args:
            out["items"] = _type_schema(args[0], where)
        return out
    if tp is dict or origin is dict:
        return {"type": "object"}
    raise ToolSchemaError(f"{where}: type {tp!r} has no JSON-Schema equivalent; use str, int, float, bool, list, dict or Literal")


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Summary paragraph and per-argument descriptions from a Google-style `Args:` section."""
    doc = inspect.cleandoc(doc or "")
    if not doc:
        return "", {}
    parts = re.split(r"\n\s*(?:Args|Arguments|Parameters)\s*:\s*\n", doc, maxsplit=1)
    summary = " ".join(parts[0].split("\n\n")[0].split())
    params: dict[str, str] = {}
    if len(parts) == 2:
        current = None
        for line in parts[1].splitlines():
            if re.match(r"^\s*(Returns|Raises|Yields|Examples?)\s*:", line):
                break
            m = re.match(r"^\s*(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", line)
            if m:
                current = m.group(1)
                params[current] = m.group(2).strip()
            elif current and line.strip():
                params[current] += " " + line.strip()
    return summary, params


class Tool:
    """A callable exposed to the model. `fn` may be sync or async; a parameter named `ctx` gets the ToolContext."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None, description: str | None = None,
                 parameters: dict[str, Any] | None = None) -> None:
        self.fn = fn
        self.name = name or fn.__name__
        if not re.match(r"^[A-Za-z0-9_-]{1,64}$", self.name):
            raise ToolSchemaError(f"tool name {self.name!r} must match ^[A-Za-z0-9_-]{{1,64}}$")
        summary, arg_docs = _parse_docstring(fn.__doc__ or "")
        self.description = description if description is not None else summary
        sig = inspect.signature(fn)
        self.takes_ctx = "ctx" in sig.parameters
        if parameters is None:
            try:
                hints = typing.get_type_hints(fn)
            except Exception:
                hints = {}
            props: dict[str, Any] = {}
            required: list[str] = []
            for pname, p in sig.parameters.items():
                if pname == "ctx":
                    continue
                if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                    raise ToolSchemaError(f"tool {self.name!r}: *args/**kwargs cannot be described to the model")
                schema = _type_schema(hints.get(pname, p.annotation), f"tool {self.name!r} argument {pname!r}")
                if pname in arg_docs:
                    schema["description"] = arg_docs[pname]
                if p.default is inspect.Parameter.empty:
                    required.append(pname)
                elif p.default is None or isinstance(p.default, (str, int, float, bool)):
                    schema["default"] = p.default
                props[pname] = schema
            parameters = {"type": "object", "properties": props, "required": required, "additionalProperties": False}
        check_parameters_schema(parameters, self.name)
        self.parameters = parameters
        self._validator: Any = None

    @property
    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool JSON (also what Hermes chat templates render)."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}

    def validate(self, arguments: dict[str, Any]) -> str | None:
        """None when the arguments fit the schema, else one line naming the problem."""
        if self._validator is None:
            import jsonschema

            self._validator = jsonschema.Draft202012Validator(self.parameters)
        errors = sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.path))
        if not errors:
            return None
        e = errors[0]
        where = "arguments" if not e.path else "argument " + ".".join(str(x) for x in e.path)
        return f"tool {self.name!r}: {where}: {e.message}"

    async def acall(self, arguments: dict[str, Any], ctx: ToolContext) -> tuple[str, bool]:
        """Run the tool; returns (text for the model, ok). Never raises for tool failures (an InfrastructureError
        is not one: it is raised, and the episode is masked)."""
        problem = self.validate(arguments)
        if problem is not None:
            return f"error: {problem}", False
        kwargs = dict(arguments)
        for k, s in self.parameters.get("properties", {}).items():  # 3.0 is a valid JSON integer
            if s.get("type") == "integer" and isinstance(kwargs.get(k), float):
                kwargs[k] = int(kwargs[k])
        if self.takes_ctx:
            kwargs["ctx"] = ctx
        try:
            if inspect.iscoroutinefunction(self.fn):
                out = await self.fn(**kwargs)
            else:
                out = self.fn(**kwargs)
                if inspect.isawaitable(out):
                    out = await out
        except (asyncio.CancelledError, InfrastructureError):  # not the tool's failure: the episode is masked
            raise
        except Exception as exc:  # a tool failure is an observation for the model
            return f"error: tool {self.name!r} failed: {type(exc).__name__}: {exc}", False
        if not isinstance(out, str):
            try:
                out = json.dumps(out, ensure_ascii=False, default=str)
            except (TypeError, ValueError):
                out = str(out)
        return truncate(out), True

    def __repr__(self) -> str:
        return f"Tool({self.name!r})"


def check_parameters_schema(parameters: Any, name: str = "tool") -> None:
    """Raise ToolSchemaError unless `parameters` is a valid JSON Schema for an object of arguments."""
    import jsonschema

    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        raise ToolSchemaError(f"tool {name!r}: parameters must be a JSON Schema with \"type\": \"object\"")
    try:
        jsonschema.Draft202012Validator.check_schema(parameters)
    except jsonschema.SchemaError as exc:
        raise ToolSchemaError(f"tool {name!r}: invalid parameters schema: {exc.message}") from None


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None) -> Any:
    """Decorator: `@tool` or `@tool(name=..., description=...)` turns a function into a Tool."""
    if fn is not None:
        return Tool(fn, name=name, description=description)
    return lambda f: Tool(f, name=name, description=description)


def truncate(text: str, limit: int = MAX_TOOL_OUTPUT_CHARS) -> str:
    if len(text) <= limit:
        return text
    head = limit * 3 // 4
    tail = limit - head
    return f"{text[:head]}\n... [{len(text) - limit} characters cut] ...\n{text[-tail:]}"
