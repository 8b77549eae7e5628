"""ToolEnv core behaviour with pure-Python tools (no sandbox): the episode loop, budgets,
error observations, determinism, async and sync APIs."""

from __future__ import annotations

import asyncio
import json

import pytest

from toolgym.envs import EnvStateError, Rubric, Task, ToolEnv, tool
from toolgym.envs.sources import GeneratorSource
from toolgym.errors import ConfigError


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first.
        b: second.
    """
    return a + b


def make_task(i: int) -> Task:
    return Task(id=f"t{i}", prompt=[{"role": "user", "content": f"{i} + {i * 3}?"}], ground_truth=str(4 * i))


def correct(answer, task):
    return float(answer == task.ground_truth)


def make_env(**kw) -> ToolEnv:
    kw.setdefault("system_prompt", "Use tools.")
    return ToolEnv(GeneratorSource(make_task), tools=[add], rubric=Rubric([correct]), sandbox=None, **kw)


def call(name, **args) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"


def test_full_episode_tool_then_answer():
    env = make_env()
    obs, info = env.reset(seed=5)
    assert obs[0] == {"role": "system", "content": "Use tools."} and obs[1]["role"] == "user"
    assert info["tools"][0]["function"]["name"] == "add" and info["task_id"] == env.task.id
    a, b = (int(x) for x in obs[1]["content"].rstrip("?").split(" + "))
    obs, r, term, trunc, info = env.step(call("add", a=a, b=b))
    assert obs == [{"role": "tool", "name": "add", "tool_call_id": "call_1_0", "content": str(a + b)}]
    assert (r, term, trunc) == (0.0, False, False)
    obs, r, term, trunc, info = env.step(f"The answer is \\boxed{{{a + b}}}")
    assert obs == [] and r == 1.0 and term and not trunc
    assert info["finish_reason"] == "answer" and info["answer"] == str(a + b)
    assert info["reward_components"] == {"correct": 1.0} and info["reward_breakdown"] == {"correct": 1.0}
    json.dumps(info)
    with pytest.raises(EnvStateError):
        env.step("more")


def test_wrong_answer_and_no_answer():
    env = make_env()
    env.reset(seed=1)
    *_, r, term, _, info = env.step("Answer: -1")
    assert r == 0.0 and term and info["finish_reason"] == "answer"
    env.reset(seed=1)
    *_, r, term, _, info = env.step("I give up.")
    assert r == 0.0 and term and info["finish_reason"] == "no_answer" and info["answer"] is None


@pytest.mark.parametrize(
    "text, needle",
    [
        (call("nope", x=1), "unknown tool 'nope'; available tools: add"),
        (call("add", a="1", b=2), "argument a"),
        (call("add", a=1), "'b' is a required property"),
        ('<tool_call>{"name": "add", "arguments": {</tool_call>', "invalid JSON"),
        ("<tool_call>{}", "unterminated"),
    ],
)
def test_bad_calls_become_error_observations(text, needle):
    env = make_env()
    env.reset(seed=0)
    obs, r, term, trunc, info = env.step(text)
    assert not term and not trunc and r == 0.0
    assert any(needle in m["content"] for m in obs), obs
    assert all(m["role"] == "tool" and m["content"].startswith("error:") and m["tool_call_id"] for m in obs)
    assert info["tool_errors"] >= 1


def test_truncation_at_max_turns_scores_and_reports():
    env = make_env(max_turns=2)
    env.reset(seed=0)
    assert env.step(call("add", a=1, b=1))[3] is False
    obs, r, term, trunc, info = env.step(call("add", a=1, b=1))
    assert trunc and not term and info["finish_reason"] == "max_turns" and "reward_components" in info


def test_token_budget_truncates():
    env = make_env(max_tokens=10, token_counter=lambda s: len(s.split()))
    env.reset(seed=0)
    _, _, term, trunc, info = env.step(call("add", a=1, b=1) + " pad" * 20)
    assert trunc and info["finish_reason"] == "max_tokens"


def test_tool_call_budget():
    env = make_env(max_tool_calls=2, max_turns=5)
    env.reset(seed=0)
    obs, *_ = env.step(call("add", a=1, b=1) + call("add", a=2, b=2) + call("add", a=3, b=3))
    assert [m["content"] for m in obs][:2] == ["2", "4"]
    assert "budget" in obs[2]["content"]


def test_deterministic_per_seed_and_varied_across_seeds():
    a, b = make_env(), make_env()
    assert a.reset(seed=11) == b.reset(seed=11)
    ids = {a.reset(seed=s)[1]["task_id"] for s in range(20)}
    assert len(ids) > 10


def test_options_task_and_index():
    env = make_env()
    t = {"id": "custom", "prompt": [{"role": "user", "content": "2+2"}], "ground_truth": "4"}
    obs, info = env.reset(options={"task": t})
    assert info["task_id"] == "custom" and obs[-1]["content"] == "2+2"
    assert env.reset(options={"index": 9})[1]["task_id"] == "t9"
    with pytest.raises(ConfigError, match="options\\['task'\\]"):
        env.reset(options={"task": {"prompt": []}})


def test_turn_reward_hook_and_action_as_message():
    env = make_env(turn_reward=lambda parsed, **kw: 0.1 * len(parsed.calls))
    env.reset(seed=0)
    _, r, *_ = env.step({"role": "assistant", "content": call("add", a=1, b=2)})
    assert r == pytest.approx(0.1)


def test_async_api_runs_inside_an_event_loop():
    async def main():
        env = make_env()
        obs, info = await env.areset(seed=3)
        res = await asyncio.gather(*(make_env().areset(seed=3) for _ in range(4)))
        assert all(o == obs for o, _ in res)
        out = await env.astep(call("add", a=2, b=3))
        assert out[0][0]["content"] == "5"
        # the sync API still works when called from inside a running loop
        env2 = make_env()
        assert env2.reset(seed=3)[0] == obs
        await env.aclose()

    asyncio.run(main())


def test_no_source_and_bad_config():
    env = ToolEnv(sandbox=None)
    with pytest.raises(ConfigError, match="no task source"):
        env.reset()
    with pytest.raises(ConfigError):
        ToolEnv(max_turns=0)
    with pytest.raises(ConfigError):
        ToolEnv(tools=["python"])


def test_env_without_tools_answers_directly():
    env = ToolEnv(GeneratorSource(make_task), rubric=[correct], sandbox=None)
    env.reset(seed=2)
    _, r, term, *_ = env.step(f"<tool_call>{{}}</tool_call> <answer>{env.task.ground_truth}</answer>")
    assert term and r == 1.0


def test_sandbox_tool_without_sandbox_is_an_observation():
    from toolgym.envs.builtin_tools import python_tool

    env = ToolEnv(GeneratorSource(make_task), tools=[python_tool()], parser="python", sandbox=None)
    env.reset(seed=0)
    obs, *_ = env.step("```python\nprint(1)\n```")
    assert obs[0]["content"].startswith("error:") and "sandbox" in obs[0]["content"]


def test_reward_range_follows_the_rubric():
    env = ToolEnv(GeneratorSource(make_task), rubric=Rubric([correct, (correct, 2.0)]), sandbox=None)
    assert env.reward_range == (0.0, 3.0)
    env.reset(seed=1)
    *_, r, _, _, info = env.step(f"Answer: {env.task.ground_truth}")
    assert r == 3.0 and info["reward_breakdown"] == {"correct": 1.0, "correct_1": 2.0}


def test_sync_api_inside_a_running_loop_keeps_the_callers_episode():
    """Round-6 red team y07: reset/step called from inside a running loop drive the env's own loop on a
    helper thread, which lost the caller's context, so sandbox calls made there carried no episode
    (toolgym.sandbox.tenancy) and could share a sandbox with another episode of the same task."""
    from toolgym.sandbox import tenancy

    seen = []

    @tool
    def where() -> str:
        """Report the episode this call belongs to."""
        seen.append(tenancy.current())
        return "ok"

    env = ToolEnv(GeneratorSource(make_task), tools=[where], rubric=Rubric([correct]), sandbox=None,
                  system_prompt="Use tools.")

    async def inside_a_loop():
        with tenancy.episode({"task": "t1"}) as ep:
            env.reset(seed=1)
            env.step(call("where"))
            return ep

    ep = asyncio.run(inside_a_loop())
    assert seen == [ep]
