"""The @tool decorator, schema generation and argument validation."""

from __future__ import annotations

import asyncio
from typing import Literal

import jsonschema
import pytest

from toolgym.envs.tools import Tool, ToolContext, ToolSchemaError, check_parameters_schema, tool, truncate


@tool
def search(query: str, limit: int = 5, mode: Literal["fast", "deep"] = "fast", tags: list[str] | None = None) -> str:
    """Search the notes.

    Longer explanation that is not part of the summary.

    Args:
        query: what to look for.
        limit: how many results
            to return at most.
    """
    return f"{query}:{limit}:{mode}:{tags}"


def run(t: Tool, args: dict) -> tuple[str, bool]:
    return asyncio.run(t.acall(args, ToolContext()))


def test_schema_from_signature_and_docstring():
    s = search.schema
    assert s["type"] == "function"
    fn = s["function"]
    assert fn["name"] == "search" and fn["description"] == "Search the notes."
    props = fn["parameters"]["properties"]
    assert props["query"] == {"type": "string", "description": "what to look for."}
    assert props["limit"]["type"] == "integer" and props["limit"]["default"] == 5
    assert props["limit"]["description"] == "how many results to return at most."
    assert props["mode"]["enum"] == ["fast", "deep"]
    assert props["tags"]["type"] == "array" and props["tags"]["items"] == {"type": "string"}
    assert fn["parameters"]["required"] == ["query"]
    jsonschema.Draft202012Validator.check_schema(fn["parameters"])


def test_call_and_validation_errors_name_the_problem():
    assert run(search, {"query": "x"}) == ("x:5:fast:None", True)
    assert run(search, {"query": "x", "limit": 2.0}) == ("x:2:fast:None", True)
    out, ok = run(search, {"query": 3})
    assert not ok and "query" in out and "string" in out
    out, ok = run(search, {})
    assert not ok and "'query' is a required property" in out
    out, ok = run(search, {"query": "x", "bogus": 1})
    assert not ok and "bogus" in out
    out, ok = run(search, {"query": "x", "mode": "slow"})
    assert not ok and "mode" in out


def test_tool_exceptions_become_text():
    @tool
    def boom(x: int) -> str:
        """Fails."""
        raise ValueError("nope")

    out, ok = run(boom, {"x": 1})
    assert not ok and "ValueError: nope" in out and out.startswith("error:")


def test_async_tool_ctx_and_non_string_results():
    @tool(name="ctx_echo", description="Echo the task.")
    async def echo(n: int, ctx: ToolContext) -> dict:
        await asyncio.sleep(0)
        return {"n": n, "task": ctx.task}

    assert "ctx" not in echo.parameters["properties"]
    out = asyncio.run(echo.acall({"n": 2}, ToolContext(task="t1")))
    assert out == ('{"n": 2, "task": "t1"}', True)


def test_bad_signatures_and_schemas_are_config_errors():
    with pytest.raises(ToolSchemaError, match="set"):
        @tool
        def f(x: set) -> str:
            """x"""
            return ""
    with pytest.raises(ToolSchemaError, match="kwargs"):
        @tool
        def g(**kw: int) -> str:
            """x"""
            return ""
    with pytest.raises(ToolSchemaError, match="name"):
        Tool(lambda: "", name="bad name!")
    with pytest.raises(ToolSchemaError, match="object"):
        check_parameters_schema({"type": "string"})
    with pytest.raises(ToolSchemaError, match="invalid parameters schema"):
        check_parameters_schema({"type": "object", "properties": {"x": {"type": 12}}})


def test_truncate_keeps_head_and_tail():
    text = "a" * 5000 + "END"
    out = truncate(text, 100)
    assert out.startswith("a") and out.endswith("END") and "cut" in out and len(out) < 200
