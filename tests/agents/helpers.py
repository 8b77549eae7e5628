"""Small environments for the agents tests (the real ones come from toolgym.envs)."""

from __future__ import annotations

import asyncio
import os

import pytest


def _ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def need(cond: bool, why: str) -> None:
    """Skip locally when a part is missing; under CI=true the test must fail instead."""
    if not cond:
        if _ci():
            pytest.fail(f"CI=true but {why}")
        pytest.skip(why)


CALC_TOOL = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
    },
}


class ToolEchoEnv:
    """A tiny multi-turn tool env: every step answers with a tool message until `turns` steps were taken.

    Stands in for the real environments of toolgym.envs while those are built; same contract:
    reset(seed, options) -> (messages, info with task_id and tools); step(text) -> 5-tuple.
    """

    def __init__(self, turns: int = 3, tool_latency_s: float = 0.0, raise_on_turn: int | None = None) -> None:
        self.turns = turns
        self.tool_latency_s = tool_latency_s
        self.raise_on_turn = raise_on_turn
        self.t = 0
        self.seed: int | None = None

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[list[dict], dict]:
        self.t, self.seed = 0, seed
        msgs = [{"role": "system", "content": "You are a calculator agent."},
                {"role": "user", "content": f"What is {seed} + 3? Use the calc tool."}]
        return msgs, {"task_id": f"echo-{seed}", "tools": [CALC_TOOL]}

    def step(self, text: str) -> tuple[list[dict], float, bool, bool, dict]:
        self.t += 1
        if self.raise_on_turn == self.t:
            raise RuntimeError("the calc tool crashed")
        if self.t >= self.turns:
            return [], float(str((self.seed or 0) + 3) in text), True, False, {"reward_breakdown": {"correct": 0.0}}
        return [{"role": "tool", "content": f"result {self.t}"}], 0.0, False, False, {}


class AsyncToolEchoEnv(ToolEchoEnv):
    """Same env with asyncio areset/astep and a tool that takes time (sleeps without blocking the loop)."""

    async def areset(self, seed: int | None = None, options: dict | None = None) -> tuple[list[dict], dict]:
        return self.reset(seed=seed, options=options)

    async def astep(self, text: str) -> tuple[list[dict], float, bool, bool, dict]:
        await asyncio.sleep(self.tool_latency_s)
        return self.step(text)
