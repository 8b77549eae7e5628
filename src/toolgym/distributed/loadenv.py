"""A synthetic tool-heavy environment: every turn runs a fixed amount of work in the sandbox.

Used by the fault-tolerance tests and by benchmarks/scaling.py to put load on the sandbox pools
regardless of what the policy writes (a tiny random model rarely emits a tool call of its own).
"""

from __future__ import annotations

from typing import Any

_TOOL = {"type": "function", "function": {"name": "work", "description": "Run the workload.",
                                          "parameters": {"type": "object", "properties": {}}}}


def work_code(iters: int, sleep_s: float = 0.0) -> str:
    """Python source: ``iters`` loop iterations of CPU work, then an optional sleep (waiting on I/O)."""
    return (f"import time\ns = 0\nfor i in range({int(iters)}):\n    s = (s + i * i) % 1000003\n"
            f"time.sleep({float(sleep_s)!r})\nprint(s)")


def expected_output(iters: int) -> str:
    s = 0
    for i in range(int(iters)):
        s = (s + i * i) % 1000003
    return str(s)


class SandboxLoadEnv:
    """``turns`` steps per episode; each step runs :func:`work_code` in the sandbox it was given.

    The reward is 1 when every sandbox call printed the right number (so a broken sandbox shows)."""

    def __init__(self, *, sandbox: Any, turns: int = 2, iters: int = 20_000, sleep_s: float = 0.0) -> None:
        if sandbox is None:
            from toolgym.errors import ConfigError

            raise ConfigError("SandboxLoadEnv needs a sandbox")
        self.sandbox, self.turns, self.iters, self.sleep_s = sandbox, turns, iters, sleep_s
        self._expect = expected_output(iters)
        self.t, self.ok, self.seed = 0, True, None

    async def areset(self, seed: int | None = None, options: dict | None = None) -> tuple[list[dict], dict]:
        self.t, self.ok, self.seed = 0, True, seed
        msgs = [{"role": "system", "content": "Call the work tool."},
                {"role": "user", "content": f"Job {seed}: run the workload {self.turns} times."}]
        return msgs, {"task_id": f"load-{seed}", "tools": [_TOOL]}

    async def astep(self, text: str) -> tuple[list[dict], float, bool, bool, dict]:
        self.t += 1
        res = await self.sandbox.arun(work_code(self.iters, self.sleep_s))
        self.ok = self.ok and res.status == "ok" and res.stdout.strip() == self._expect
        if self.t >= self.turns:
            return [], float(self.ok), True, False, {"finish_reason": "answer"}
        return [{"role": "tool", "content": res.stdout.strip()[:64]}], 0.0, False, False, {}

    def close(self) -> None:
        return None
