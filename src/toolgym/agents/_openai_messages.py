"""OpenAI chat messages as the recording proxy reads them: validated, compared and handed to a chat template.

Why a module of its own: a request's messages are the program's (hostile) input. They are checked once
here, with one clear line per problem, and reduced to a key that compares an assistant turn the program
sends back with the turn the proxy returned, whatever the client adds (``refusal: null``), drops
(``content: null``) or reorders (the JSON of tool-call arguments).
"""

from __future__ import annotations

import json
from typing import Any

ROLES = ("system", "developer", "user", "assistant", "tool")


class RequestError(ValueError):
    """A request the proxy refuses: its message is the one line the client reads (HTTP 400)."""


def text_of(content: Any, where: str) -> str:
    """A message's content as text: a string, null, or a list of text parts (images are refused)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise RequestError(f"{where}: only text content parts are supported")
            out.append(part["text"])
        return "".join(out)
    raise RequestError(f"{where}: content must be a string, null or a list of text parts")


def arguments_of(raw: Any, where: str) -> dict[str, Any]:
    """Tool-call arguments as a dict (the API sends them as a JSON string)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except (ValueError, RecursionError):
            raise RequestError(f"{where}: arguments are not valid JSON") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise RequestError(f"{where}: arguments must be a JSON object")
    return raw


def normalize(messages: Any) -> list[dict[str, Any]]:
    """The request's messages checked and in one shape: content as text, tool-call arguments as dicts,
    tool results named after the call they answer (templates that print the function's name need it)."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list")
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise RequestError(f"{where} must be an object")
        role = m.get("role")
        if role not in ROLES:
            raise RequestError(f"{where}: role must be one of {', '.join(ROLES)}")
        msg: dict[str, Any] = {"role": "system" if role == "developer" else role,
                               "content": text_of(m.get("content"), where)}
        if role == "assistant" and m.get("tool_calls"):
            calls = m["tool_calls"]
            if not isinstance(calls, list):
                raise RequestError(f"{where}: tool_calls must be a list")
            msg["tool_calls"] = []
            for j, c in enumerate(calls):
                fn = c.get("function") if isinstance(c, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise RequestError(f"{where}.tool_calls[{j}]: needs function.name")
                cid = str(c.get("id") or f"call_{i}_{j}")
                names[cid] = fn["name"]
                msg["tool_calls"].append({"id": cid, "type": "function", "function": {
                    "name": fn["name"], "arguments": arguments_of(fn.get("arguments"), f"{where}.tool_calls[{j}]")}})
        if role == "tool":
            cid = m.get("tool_call_id")
            msg["tool_call_id"] = str(cid) if cid is not None else ""
            msg["name"] = m.get("name") if isinstance(m.get("name"), str) else names.get(msg["tool_call_id"], "tool")
        out.append(msg)
    return out


def key(message: dict[str, Any]) -> str:
    """What makes two normalized messages the same turn (the order of argument keys aside)."""
    return json.dumps(message, sort_keys=True, ensure_ascii=False)


def tools_of(tools: Any) -> list[dict[str, Any]] | None:
    """The request's function tools, checked (None when it has none)."""
    if tools is None or tools == []:
        return None
    if not isinstance(tools, list):
        raise RequestError("'tools' must be a list")
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("type", "function") != "function" or not isinstance(fn, dict) \
                or not isinstance(fn.get("name"), str):
            raise RequestError(f"tools[{i}]: only function tools with a name are supported")
    return tools
