"""An agent program as people write them: the official `openai` client, one tool, a plain tool-call loop.
Nothing here knows about toolgym; it reads its endpoint from the environment, as OpenAI programs do.
    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 python examples/openai_agent.py "What is 3*4?"
"""

import ast
import json
import operator
import os
import sys

from openai import OpenAI

OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
TOOL = {"type": "function", "function": {"name": "python", "description": "Run print(<arithmetic>).",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}}


def value(node):  # integers with + - * only: what the model writes is never executed
    if isinstance(node, ast.Constant) and type(node.value) is int and abs(node.value) < 10**12:
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in OPS:
        return OPS[type(node.op)](value(node.left), value(node.right))
    raise ValueError(node)


def python(arguments):
    try:
        call = ast.parse(json.loads(arguments)["code"][:200].strip()).body[0].value
        assert call.func.id == "print" and len(call.args) == 1
        return str(value(call.args[0]))
    except Exception:  # noqa: BLE001 (a malformed call is the model's mistake: it is told so)
        return "error: write print(<arithmetic>)"


client = OpenAI(base_url=os.environ.get("OPENAI_BASE_URL"), api_key=os.environ.get("OPENAI_API_KEY", "none"))
messages = [{"role": "user", "content": sys.argv[1]}]
for _ in range(3):
    message = client.chat.completions.create(model="policy", messages=messages, tools=[TOOL],
                                             max_tokens=256).choices[0].message
    messages.append(message.model_dump(exclude_none=True))
    for call in message.tool_calls or []:
        messages.append({"role": "tool", "tool_call_id": call.id, "content": python(call.function.arguments)})
    if not message.tool_calls:
        break
print(messages[-1].get("content") or "")
