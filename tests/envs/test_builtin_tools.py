"""Built-in tools on a real sandbox (local bubblewrap; docker too when the engine and image exist)."""

from __future__ import annotations

import asyncio

import pytest

from tests.requirements import need
from toolgym.envs import Task, ToolEnv
from toolgym.envs.builtin_tools import calculator_tool, python_tool
from toolgym.envs.sources import ListSource
from toolgym.sandbox import Limits


def task() -> Task:
    return Task(id="t", prompt=[{"role": "user", "content": "compute"}], ground_truth="1")


def env_with(tools, sandbox, **kw) -> ToolEnv:
    return ToolEnv(ListSource([task()]), tools=tools, parser="hermes+python", sandbox=sandbox, **kw)


def test_python_tool_runs_code(any_sandbox):
    env = env_with([python_tool()], any_sandbox)
    env.reset(seed=0)
    obs, *_ = env.step("```python\nprint(123456789 * 987654321)\n```")
    assert obs[0]["role"] == "tool" and obs[0]["name"] == "python"
    assert obs[0]["content"] == str(123456789 * 987654321)
    env.close()
    assert any_sandbox.run("print(1)").stdout == "1\n"  # a borrowed sandbox stays open


@pytest.mark.slow
def test_python_tool_reports_errors_timeouts_and_silence(local_sandbox):
    env = env_with([python_tool(limits=Limits(timeout_s=2))], local_sandbox, max_turns=5)
    env.reset(seed=0)
    obs, *_ = env.step("```python\n1/0\n```")
    assert "ZeroDivisionError" in obs[0]["content"] and "exit code" in obs[0]["content"]
    obs, *_ = env.step("```python\nwhile True: pass\n```")
    assert "timed out" in obs[0]["content"]
    obs, *_ = env.step("```python\nx = 1\n```")
    assert "no output" in obs[0]["content"]
    obs, *_ = env.step("```python\nprint('y' * 100000)\n```")
    assert len(obs[0]["content"]) < 6000 and "cut" in obs[0]["content"]


def test_stateless_forgets_and_stateful_remembers(local_sandbox):
    stateless = env_with([python_tool()], local_sandbox)
    stateless.reset(seed=0)
    stateless.step("```python\nx = 41\n```")
    obs, *_ = stateless.step("```python\nprint(x + 1)\n```")
    assert "NameError" in obs[0]["content"]

    stateful = env_with([python_tool(stateful=True)], local_sandbox, max_turns=6)
    stateful.reset(seed=0)
    stateful.step("```python\nx = 41\n```")
    obs, *_ = stateful.step("```python\nprint(x + 1)\n```")
    assert obs[0]["content"] == "42"
    stateful.reset(seed=0)  # a new episode gets a fresh interpreter
    obs, *_ = stateful.step("```python\nprint('x' in globals())\n```")
    assert obs[0]["content"] == "False"
    stateful.close()


def test_calculator_is_exact(local_sandbox):
    env = env_with([calculator_tool()], local_sandbox)
    env.reset(seed=0)
    obs, *_ = env.step('<tool_call>{"name": "calculator", "arguments": {"expression": "2**100 - 1"}}</tool_call>')
    assert obs[0]["content"] == str(2**100 - 1)
    obs, *_ = env.step('<tool_call>{"name": "calculator", "arguments": {"expression": "1/3 + 1/6"}}</tool_call>')
    assert obs[0]["content"].startswith("1/2")
    obs, *_ = env.step('<tool_call>{"name": "calculator", "arguments": {"expression": "(("}}</tool_call>')
    assert obs[0]["content"].startswith("error:")


def test_env_opens_and_closes_its_own_sandbox():


    from toolgym.errors import ToolgymError

    env = env_with([python_tool()], "local")
    env.reset(seed=0)
    try:
        obs, *_ = env.step("```python\nprint(2 + 2)\n```")
    except ToolgymError:
        raise
    if obs[0]["content"].startswith("error:") and "sandbox" in obs[0]["content"]:
        env.close()
        need(False, obs[0]["content"])
    assert obs[0]["content"] == "4"
    owned = env._owned_sandbox
    env.close()
    assert owned._closed


def test_concurrent_async_episodes_share_one_sandbox(local_sandbox):
    async def episode(i):
        env = env_with([python_tool()], local_sandbox)
        await env.areset(seed=i)
        obs, *_ = await env.astep(f"```python\nprint({i} * 1000)\n```")
        return obs[0]["content"]

    async def main():
        return await asyncio.gather(*(episode(i) for i in range(4)))

    assert asyncio.run(main()) == [str(i * 1000) for i in range(4)]


@pytest.mark.slow
def test_tool_calls_do_not_block_the_event_loop(local_sandbox):
    """While the sandbox sleeps, other coroutines on the loop keep running."""
    ticks = 0

    async def ticker(stop):
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0.02)

    async def main():
        env = env_with([python_tool()], local_sandbox)
        await env.areset(seed=0)
        stop = asyncio.Event()
        t = asyncio.create_task(ticker(stop))
        await asyncio.sleep(0)
        before = ticks
        obs, *_ = await env.astep("```python\nimport time\ntime.sleep(1.0)\nprint('done')\n```")
        during = ticks - before
        stop.set()
        await t
        return obs[0]["content"], during

    content, during = asyncio.run(main())
    assert content == "done"
    assert during >= 5  # about 50 expected; a blocked loop gives 0 or 1
