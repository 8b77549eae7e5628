"""A slow scorer never costs another episode its time (round-5 red team, x02).

Sync reward functions used to run on the rollout loop's thread: an answer that makes its scorer slow
(math-verify on `\\boxed{9^{9^{9}}}` takes seconds) froze every episode on the loop, and the freeze
counted as each batch-mate's own environment time, so an honest batch-mate ended as `time_limit`
(reward 0). Now sync reward functions run off the loop, each bounded by its own time.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from toolgym.agents.runner import EpisodeLimits, RolloutRunner
from toolgym.agents.sampling import Sample, Sampler, SamplingParams
from toolgym.envs.core import ToolEnv
from toolgym.envs.rubric import Rubric
from toolgym.envs.tools import tool
from toolgym.envs.types import Task
from toolgym.training.algorithms.base import scored_rewards

TASKS = [{"id": "honest", "prompt": [{"role": "user", "content": "H: 2+2?"}], "ground_truth": "4"},
         {"id": "slow", "prompt": [{"role": "user", "content": "S: 1+2?"}], "ground_truth": "3"}]
TOOL_CALL = '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'


class Chars:
    """One token per character."""

    def prompt_ids(self, messages, tools=None):
        return [ord(c) for c in "".join(f"<{m['role']}>{m.get('content') or ''}" for m in messages)]

    def continuation_ids(self, sampled_ids, new_messages):
        return self.prompt_ids(new_messages)

    def decode(self, ids, skip_special_tokens=False):
        return "".join(map(chr, ids))


class Policy(Sampler):
    """The honest episode calls a tool (its own 0.6 s), then answers; the others answer at once."""

    name = "policy"

    async def agenerate(self, prompts, params):
        text = "".join(map(chr, prompts[0]))
        if "S: " in text:
            await asyncio.sleep(0.1)  # the honest tool call is under way when the slow scoring starts
            out = "\\boxed{3}"
        else:
            out = "\\boxed{4}" if "<tool>" in text else TOOL_CALL
        return [[Sample([ord(c) for c in out], [0.0] * len(out), "stop")]]


@tool
async def lookup() -> str:
    """Takes 0.6 s of the calling episode's own time."""
    for _ in range(6):
        await asyncio.sleep(0.1)
    return "4"


def slow_scorer(answer, task):
    """A sync reward function that takes 1.2 s on the answers of the "slow" task (a real stall)."""
    if task.id == "slow":
        time.sleep(1.2)
    return float(answer == task.ground_truth)


@pytest.mark.slow
def test_a_slow_scorer_does_not_push_an_honest_batch_mate_into_time_limit():
    runner = RolloutRunner(Policy(), Chars(),
                           lambda: ToolEnv(TASKS, tools=[lookup], rubric=Rubric([slow_scorer]), parser="hermes",
                                           max_turns=3, sandbox=None),
                           SamplingParams(max_tokens=64), EpisodeLimits(max_turns=3, max_total_tokens=4096, max_wall_s=2.0))
    groups = runner.run([{"options": {"index": 0}}] + [{"options": {"index": 1}}] * 3, group_size=1)
    honest = groups[0][0]
    assert honest.finish_reason == "answer", (honest.finish_reason, honest.error)
    assert scored_rewards([honest])[0] == [1.0]
    assert [g[0].finish_reason for g in groups[1:]] == ["answer"] * 3  # 1.2 s each: within their own 2 s


def test_a_sync_reward_function_over_its_bound_scores_zero_with_a_note():
    rubric = Rubric([slow_scorer, (lambda answer: 1.0, 0.5)], sync_timeout_s=0.3)
    res = rubric.score(answer="3", task=Task.from_dict(TASKS[1]))
    assert res.components["slow_scorer"] == 0.0 and res.total == 0.5
    assert res.errors["slow_scorer"].startswith("RewardTimeout:") and "\n" not in res.errors["slow_scorer"]


def test_sync_reward_functions_leave_the_loop_free():
    ticks = []

    async def main():
        async def tick():
            for _ in range(10):
                ticks.append(time.perf_counter())
                await asyncio.sleep(0.05)

        t = asyncio.ensure_future(tick())
        await asyncio.sleep(0.06)  # the ticker is running
        await Rubric([lambda: time.sleep(0.5) or 1.0]).ascore()
        await t

    asyncio.run(main())
    assert max(b - a for a, b in zip(ticks, ticks[1:], strict=False)) < 0.3


@pytest.mark.slow
def test_a_reward_functions_bound_leaves_out_its_waits_for_others():
    """Two episodes' scorers share one worker (as math_equal's verifier worker is shared): the one that
    waits for the other is not timed out for it, and the episode's clock leaves the wait out too."""
    import threading

    from toolgym.sandbox import waiting

    worker = threading.Lock()

    def shared_worker_scorer():
        with waiting.waiting():
            worker.acquire()
        try:
            time.sleep(0.6)
        finally:
            worker.release()
        return 1.0

    rubric = Rubric([shared_worker_scorer], sync_timeout_s=1.0)
    clocks = [waiting.WaitClock(), waiting.WaitClock()]

    async def one(clock):
        with waiting.measuring(clock):
            return await asyncio.ensure_future(rubric.ascore())

    async def main():
        return await asyncio.gather(*(one(c) for c in clocks))

    results = asyncio.run(main())
    assert [r.total for r in results] == [1.0, 1.0], [r.errors for r in results]
    assert max(c.seconds for c in clocks) > 0.4  # one of them waited for the other, on its episode's clock
