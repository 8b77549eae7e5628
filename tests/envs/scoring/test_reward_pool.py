"""An author's reward function that stalls is killed, and no other episode waits for it (issue 36).

A sync reward function with a regular expression that backtracks on the answer holds the GIL for
as long as the match runs: on a thread of the trainer's process it froze the event loop, every
episode and their clocks (an honest batch-mate with a tool call in flight ended as `time_limit`),
and its bound could not fire. Module-level author functions now run in a worker process killed at
the bound. The reward functions are in `tests/envs/stall_env.py`, a module a child imports by name.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import types

import pytest

from tests.agents.test_reward_off_loop import Chars, Policy, lookup
from tests.envs import stall_env
from toolgym.agents.runner import EpisodeLimits, RolloutRunner
from toolgym.agents.sampling import SamplingParams
from toolgym.envs.rubric import Rubric
from toolgym.envs.scoring import reward_pool
from toolgym.envs.types import Task
from toolgym.errors import InfrastructureError
from toolgym.training.algorithms.base import scored_rewards

STALL, HONEST = (Task.from_dict(t) for t in stall_env.TASKS)


def test_a_stalled_reward_is_killed_and_no_other_scoring_waits_for_it():
    rubric = Rubric([stall_env.backtracking_reward], sync_timeout_s=1.0)
    kills = reward_pool.pool().kills
    ticks: list[float] = []

    async def timed(task, answer):
        began = time.perf_counter()
        res = await rubric.ascore(answer=answer, task=task)
        return res, time.perf_counter() - began

    async def main():
        # one warm child per concurrent scoring, so starting them is not in the figures below
        await asyncio.gather(*(rubric.ascore(answer="4", task=HONEST) for _ in range(4)))
        done = False

        async def tick():
            while not done:
                ticks.append(time.perf_counter())
                await asyncio.sleep(0.02)

        ticker = asyncio.ensure_future(tick())
        await asyncio.sleep(0.05)
        out = await asyncio.gather(timed(STALL, "3"), *(timed(HONEST, "4") for _ in range(3)))
        done = True
        await ticker
        return out

    (stalled, stall_s), *honest = asyncio.run(main())
    assert stalled.total == 0.0 and stalled.components == {"backtracking_reward": 0.0}
    assert stalled.errors["backtracking_reward"].startswith("RewardTimeout:"), stalled.errors
    assert "killed" in stalled.errors["backtracking_reward"]
    assert reward_pool.pool().kills == kills + 1  # counted
    assert stall_s < 5.0  # ended at its bound (1 s), not when the match would have (about 6 s)
    for res, seconds in honest:
        assert res.total == 1.0 and not res.errors, res.errors
        assert seconds < 1.0, honest  # none waited for the stall's bound (on a thread: the whole match)
    assert max(b - a for a, b in zip(ticks, ticks[1:], strict=False)) < 1.0  # the loop never stopped


def test_a_stalled_episode_ends_as_its_own_failure_and_an_honest_batch_mate_is_untouched():
    """The honest episode has a tool call in flight (0.6 s of its own 2 s) while the stall is scored."""
    kills = reward_pool.pool().kills
    runner = RolloutRunner(Policy(), Chars(), lambda: stall_env.make_env(tools=[lookup], max_turns=3),
                           SamplingParams(max_tokens=64),
                           EpisodeLimits(max_turns=3, max_total_tokens=4096, max_wall_s=2.0))
    groups = runner.run([{"options": {"index": 1}}, {"options": {"index": 0}}], group_size=1)
    honest, stalled = groups[0][0], groups[1][0]
    assert honest.finish_reason == "answer", (honest.finish_reason, honest.error)
    assert scored_rewards([honest])[0] == [1.0]
    assert stalled.finish_reason == "answer" and scored_rewards([stalled])[0] == [0.0]
    assert stalled.metadata["env_info"]["reward_errors"]["backtracking_reward"].startswith("RewardTimeout:")
    assert reward_pool.pool().kills == kills + 1


def test_only_module_level_functions_without_state_leave_the_process():
    here = float(os.getpid())
    by_name = Rubric([stall_env.where_scored]).score(completion="x")
    assert by_name.components["where_scored"] not in (0.0, here), by_name.errors
    closure = Rubric([lambda completion: float(os.getpid())]).score(completion="x")
    assert list(closure.components.values()) == [here]
    stateful = Rubric([stall_env.with_state]).score(state={})
    assert stateful.components["with_state"] == here
    kept = Rubric([stall_env.where_scored], isolate=False).score(completion="x")
    assert kept.components["where_scored"] == here


def test_a_function_the_child_cannot_import_runs_on_a_thread_instead():
    made = types.ModuleType("made_at_run_time")
    exec("import os\ndef pid(completion):\n    return float(os.getpid())\n", made.__dict__)
    sys.modules[made.__name__] = made
    try:
        rubric = Rubric([made.pid])
        assert rubric.score(completion="x").components == {"pid": float(os.getpid())}
        assert rubric.score(completion="x").components == {"pid": float(os.getpid())}  # remembered
    finally:
        del sys.modules[made.__name__]


def test_an_error_in_the_child_scores_zero_and_says_what_it_was():
    res = Rubric([stall_env.raises, (stall_env.backtracking_reward, 0.5)]).score(answer="4", task=HONEST)
    assert res.components == {"raises": 0.0, "backtracking_reward": 1.0} and res.total == 0.5
    assert "ValueError: no answer like '4'" in res.errors["raises"]


def test_an_infrastructure_error_in_the_child_is_raised_on_so_the_episode_is_masked():
    with pytest.raises(InfrastructureError, match="the verifier service is down"):
        Rubric([stall_env.engine_down]).score(answer="4")
