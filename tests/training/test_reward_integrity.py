"""Reward integrity end to end (issue 25): episodes run through `RolloutRunner` on a real sandbox and
scored with the trainer's `scored_rewards`, on both backends.

A program that attacks its sandbox (fills the process table, stops the cleaner) is scored 0 and
counted, and its correct group-mates keep their reward 1: masking (NaN) is only for what no
program could have caused. Waiting for the pool or for batch-mates never counts against an
episode's time; a stalled environment call counts as the program's own time.

The policy is scripted (each episode's turns are fixed texts, encoded one character per token):
what is under test is the sandbox, the environment, the runner and the trainer's masking rule.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.sandbox.conftest import require_backend
from tests.sandbox.judging import FILL, STOP, SandboxKiller
from toolgym.agents.runner import EpisodeLimits, RolloutRunner
from toolgym.agents.sampling import Sample, Sampler, SamplingParams
from toolgym.envs.builtin_tools import python_tool
from toolgym.envs.core import ToolEnv
from toolgym.envs.tasks.code_contest import CodeContestEnv
from toolgym.envs.types import Task
from toolgym.sandbox import Limits, open_sandbox
from toolgym.training.algorithms.base import INFRA_FAILURES, scored_rewards

RIGHT = "def add(a, b):\n    return a + b\n"
SLOW_RIGHT = "import time\ndef add(a, b):\n    time.sleep(1.0)\n    return a + b\n"
FILL_WRONG = FILL + "def add(a, b):\n    _fill()\n    return a - b\n"
STOP_WRONG = STOP + "def add(a, b):\n    _stoppers()\n    time.sleep(0.3)\n    return a - b\n"
ROW = {"id": "add", "prompt": "Write add(a, b).", "mode": "function", "entry_point": "add",
       "public_tests": [{"call": "add", "args": [1, 2], "expected": 3}],
       "tests": [{"call": "add", "args": [a, b], "expected": a + b} for a, b in ((2, 3), (10, -4), (7, 7))]}


class CharTemplate:
    """One token per character, so a scripted turn round-trips exactly."""

    @staticmethod
    def _text(messages: list[dict]) -> str:
        return "".join(f"<{m.get('role')}>{m.get('content') or ''}\n" for m in messages)

    def prompt_ids(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        return [ord(c) for c in self._text(messages) + "<assistant>"]

    def continuation_ids(self, sampled_ids: list[int], new_messages: list[dict]) -> list[int]:
        return [ord(c) for c in "\n" + self._text(new_messages) + "<assistant>"]

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return "".join(map(chr, ids))


class ScriptedPolicy(Sampler):
    """Episode e answers turn t with scripts[e][t] (the last one again once its script runs out)."""

    name = "scripted"

    def __init__(self, scripts: list[list[str]]) -> None:
        self.scripts = scripts
        self.by_seed: dict[int, str] = {}

    def bind(self, runner: RolloutRunner, task_index: int = 0) -> RolloutRunner:
        for e, turns in enumerate(self.scripts):
            for t in range(runner.limits.max_turns):
                self.by_seed[runner._seed(task_index, e, t)] = turns[min(t, len(turns) - 1)]
        return runner

    async def agenerate(self, prompts, params):
        text = self.by_seed[params.seed]
        return [[Sample([ord(c) for c in text], [0.0] * len(text), "stop")] for _ in prompts]


def block(code: str) -> str:
    return f"```python\n{code}```"


def tool_call(code: str) -> str:
    import json

    return "<tool_call>" + json.dumps({"name": "run_tests", "arguments": {"code": code}}) + "</tool_call>"


@pytest.fixture(scope="module", params=["local", "docker"])
def shared_sb(request):
    """One sandbox with one worker, shared by every episode: their judge calls are micro-batched."""
    require_backend(request.param)
    sb = open_sandbox(request.param, Limits(timeout_s=10, memory_mb=512, pids=64), pool_size=1)
    sb.wait_ready(120)
    yield sb
    sb.close()


def run_group(sb, scripts: list[list[str]], max_wall_s: float = 300.0, **env_kw):
    policy = ScriptedPolicy(scripts)
    runner = RolloutRunner(policy, CharTemplate(), lambda: CodeContestEnv(dataset=[ROW], sandbox=sb, **env_kw),
                           SamplingParams(max_tokens=4096), EpisodeLimits(max_turns=4, max_total_tokens=1 << 16,
                                                                          max_wall_s=max_wall_s), seed=0)
    (group,) = policy.bind(runner).run([{"seed": 0, "options": {"index": 0}}], group_size=len(scripts))
    return group


def assert_scored(group, expected: list[float]) -> None:
    rewards, infra = scored_rewards(group)
    reasons = [t.finish_reason for t in group]
    assert infra == 0 and not set(reasons) & set(INFRA_FAILURES), (reasons, [t.error for t in group])
    assert rewards == expected, (rewards, reasons, [t.metadata.get("env_info") for t in group])


@pytest.mark.slow
@pytest.mark.parametrize("attack", ["fill the process table", "stop the cleaner"])
def test_an_attacking_episode_scores_zero_and_its_group_mates_one(shared_sb, attack):
    bad = FILL_WRONG if attack == "fill the process table" else STOP_WRONG
    # feedback_turns: a failing submission is first judged on the public tests (on_final), batched with the
    # group-mates' judging; then again on the hidden ones
    group = run_group(shared_sb, [[block(RIGHT)], [block(bad)], [block(RIGHT)], [block(RIGHT)]], feedback_turns=1)
    assert_scored(group, [1.0, 0.0, 1.0, 1.0])
    assert group[1].finish_reason == "answer"


@pytest.mark.slow
def test_an_attack_through_the_run_tests_tool_reaches_no_group_mate(shared_sb):
    scripts = [[tool_call(RIGHT), block(RIGHT)], [tool_call(FILL_WRONG), block(FILL_WRONG)],
               [tool_call(RIGHT), block(RIGHT)], [tool_call(RIGHT), block(RIGHT)]]
    group = run_group(shared_sb, scripts, tools=True)
    assert_scored(group, [1.0, 0.0, 1.0, 1.0])
    for i in (0, 2, 3):
        shown = [m["content"] for m in group[i].turns if m.get("role") == "tool"]
        assert shown and shown[0].startswith("passed 1/1"), shown


@pytest.mark.slow
def test_waiting_for_batch_mates_does_not_count_against_an_episodes_time(shared_sb):
    # four slow but right programs (3 tests x 1 s each) judged before four fast ones in one batch: the fast
    # ones wait 12 s or more for them, while the limit is 8 s of each episode's own time (about 3 s for a
    # slow one, well under a second for a fast one: room for a loaded machine)
    scripts = [[block(SLOW_RIGHT)]] * 4 + [[block(RIGHT)]] * 4
    group = run_group(shared_sb, scripts, max_wall_s=8.0, time_limit_s=5.0)
    assert_scored(group, [1.0] * 8)


@pytest.mark.slow
def test_an_engine_fault_is_masked(shared_sb):
    """A fault that a control run sees too is an infrastructure failure: not the program's, so NaN."""
    with SandboxKiller(None) as killer:
        assert killer.killed.wait(60)  # the pool's sandbox is dead, and every new one dies
        group = run_group(shared_sb, [[block(RIGHT)], [block(RIGHT)]])
    shared_sb.wait_ready(120)
    rewards, infra = scored_rewards(group)
    assert infra == 2 and all(r != r for r in rewards), [(t.finish_reason, t.error) for t in group]
    assert {t.finish_reason for t in group} <= set(INFRA_FAILURES)


# ------------------------------------------------------------------ tool calls and the pool
class PythonEnv(ToolEnv):
    def __init__(self, sb) -> None:
        task = Task(id="seven", prompt=[{"role": "user", "content": "Print 7 with python, then answer."}],
                    ground_truth="7")
        super().__init__([task], tools=[python_tool()], parser="hermes", sandbox=sb, max_turns=3)


@pytest.mark.slow
def test_waiting_for_the_pool_does_not_count_against_an_episodes_time(shared_sb):
    # six episodes' tool calls take 1.5 s each on a one-worker pool: the last waits 7.5 s or more for the
    # others, against a limit of 5 s of its own time (about 1.5 s: room for a loaded machine)
    call = '<tool_call>{"name": "python", "arguments": {"code": "import time\\ntime.sleep(1.5)\\nprint(7)"}}</tool_call>'
    policy = ScriptedPolicy([[call, "Answer: 7"]] * 6)
    runner = RolloutRunner(policy, CharTemplate(), lambda: PythonEnv(shared_sb), SamplingParams(max_tokens=4096),
                           EpisodeLimits(max_turns=3, max_total_tokens=1 << 16, max_wall_s=5.0), seed=0)
    (group,) = policy.bind(runner).run([0], group_size=6)
    assert_scored(group, [1.0] * 6)
    assert all("7" in [m["content"] for m in t.turns if m.get("role") == "tool"][0] for t in group)


def test_the_runner_never_blocks_on_a_stalled_env_beyond_its_own_time():
    """A stalled environment call (no sandbox here: an env that never answers) ends the episode as the
    program's timeout: counted, reward 0."""

    class Stalled:
        def reset(self, seed=None, options=None):
            return [{"role": "user", "content": "hi"}], {"task_id": "stall"}

        async def astep(self, text):
            await asyncio.sleep(3600)

    policy = ScriptedPolicy([["x"], ["x"]])
    runner = RolloutRunner(policy, CharTemplate(), Stalled, SamplingParams(max_tokens=64),
                           EpisodeLimits(max_turns=2, max_total_tokens=4096, max_wall_s=0.5), seed=0)
    (group,) = policy.bind(runner).run([0], group_size=2)
    assert [t.finish_reason for t in group] == ["time_limit", "time_limit"]
    assert scored_rewards(group) == ([0.0, 0.0], 0)


def test_a_timeout_error_raised_inside_an_env_is_not_the_programs_timeout():
    """Only the runner's own clock decides "time_limit"; a TimeoutError from inside the environment (a
    client library's, say) is a failure no program caused: masked."""

    class Raising:
        def reset(self, seed=None, options=None):
            return [{"role": "user", "content": "hi"}], {"task_id": "raise"}

        async def astep(self, text):
            raise TimeoutError("a client library gave up")

    policy = ScriptedPolicy([["x"]])
    runner = RolloutRunner(policy, CharTemplate(), Raising, SamplingParams(max_tokens=64),
                           EpisodeLimits(max_turns=2, max_total_tokens=4096, max_wall_s=30), seed=0)
    (group,) = policy.bind(runner).run([0], group_size=1)
    assert group[0].finish_reason == "error" and "client library" in group[0].error
    assert scored_rewards(group)[1] == 1
