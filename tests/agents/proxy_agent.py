"""An agent program written against the OpenAI chat-completions API, as people write them: a loop that sends
the conversation with one tool, runs the calls it gets back and stops at an answer. The proxy tests run it
unmodified as a separate process with the proxy's URL (the official `openai` client is not installed in this
project's environment, so it speaks the same wire format with httpx)."""

import json
import os
import sys

import httpx

TOOLS = [{"type": "function", "function": {
    "name": "calc", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]}}}]


def calc(expr: str) -> str:
    a, _, b = expr.partition("+")
    return str(int(a) + int(b)) if a.strip().isdigit() and b.strip().isdigit() else "error: use a+b"


def main(base_url: str, seed: int) -> None:
    messages = [{"role": "user", "content": "What is 2 + 3? Use the calc tool."}]
    with httpx.Client(base_url=base_url, timeout=60) as client:
        for turn in range(3):
            r = client.post("/chat/completions", json={"model": "policy", "messages": messages, "tools": TOOLS,
                                                       "max_tokens": 40, "seed": seed + turn})
            r.raise_for_status()
            message = r.json()["choices"][0]["message"]
            messages.append(message)
            for call in message.get("tool_calls") or []:
                args = json.loads(call["function"]["arguments"])
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": calc(str(args.get("expr")))})
            if not message.get("tool_calls"):
                if "answer is 5" in (message["content"] or ""):
                    break
                messages.append({"role": "user", "content": "Use the calc tool."})
    print(json.dumps(messages))


if __name__ == "__main__":  # the endpoint from the environment, as the openai client reads it
    main(os.environ["OPENAI_BASE_URL"], int(sys.argv[1]) if len(sys.argv) > 1 else 0)
