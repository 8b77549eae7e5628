"""Per-token policy versions: each response token records the version of the sampler call that produced it
(tool and template tokens take their turn's), records without them still load, and a misaligned record fails."""

from __future__ import annotations

import asyncio

import pytest

from tests.agents.helpers import ToolEchoEnv, segments
from toolgym.agents.chat import ChatTemplate
from toolgym.agents.hf_sampler import HFSampler
from toolgym.agents.runner import EpisodeLimits, RolloutRunner
from toolgym.agents.sampling import Sampler, SamplingParams
from toolgym.agents.trajectory import Trajectory


class NewWeightsEachCall(Sampler):
    """A real sampler whose weights are "pushed" after each call: the version goes up by one per call, as a
    rollout worker's does when the trainer pushes between two turns of an episode."""

    def __init__(self, inner: Sampler, version: int) -> None:
        self.inner, self.max_model_len, self.name = inner, inner.max_model_len, inner.name
        self.policy_version = version

    async def agenerate(self, prompts, params):
        try:
            return await self.inner.agenerate(prompts, params)
        finally:
            self.policy_version += 1


@pytest.fixture(scope="module")
def hf(tiny_dir):
    return HFSampler(str(tiny_dir))


def _episode(sampler, tokenizer):
    runner = RolloutRunner(sampler, ChatTemplate(tokenizer),
                           lambda: ToolEchoEnv(turns=3), SamplingParams(temperature=1.0, max_tokens=5),
                           EpisodeLimits(max_turns=3, max_total_tokens=512), seed=3)
    return asyncio.run(runner.arun([1], 1))[0][0]


def test_each_token_records_the_version_of_its_turn(hf):
    traj = _episode(NewWeightsEachCall(hf, version=7), hf.tokenizer)
    assert traj.finish_reason == "answer" and len(traj.token_versions) == len(traj.response_ids)
    runs = segments(traj.loss_mask)
    turn = -1
    for start, end, model in runs:
        if model:  # a model turn starts; the template/tool run after it belongs to it
            turn += 1
        assert traj.token_versions[start:end] == [7 + turn] * (end - start)
    assert turn == 2  # three sampled turns: versions 7, 8, 9


def test_a_sampler_without_a_version_records_none(hf):
    assert hf.policy_version is None
    traj = _episode(hf, hf.tokenizer)
    assert traj.response_ids and traj.token_versions == []


def test_old_records_load_and_misaligned_versions_fail():
    old = {"task_id": "t", "group_id": "g", "prompt_ids": [1], "response_ids": [2, 3], "loss_mask": [1, 0],
           "behavior_logprobs": [-0.5, 0.0], "schema_version": 1}
    assert Trajectory.from_dict(old).token_versions == []
    with pytest.raises(ValueError, match="token_versions"):
        Trajectory.from_dict({**old, "token_versions": [4]})


class TaggedMidTurn(Sampler):
    """A real sampler whose engine tags its tokens itself, as a server does when a push lands mid-request: the
    first two tokens of each call are version ``v``, the rest ``v + 1``, and ``v`` grows by one per call."""

    def __init__(self, inner: Sampler, version: int) -> None:
        self.inner, self.max_model_len, self.name = inner, inner.max_model_len, inner.name
        self.policy_version = version

    async def agenerate(self, prompts, params):
        out = await self.inner.agenerate(prompts, params)
        for samples in out:
            for s in samples:
                s.token_versions = [self.policy_version if i < 2 else self.policy_version + 1
                                    for i in range(len(s.token_ids))]
        self.policy_version += 1
        return out


def test_engine_tags_win_over_the_version_at_the_call(hf):
    traj = _episode(TaggedMidTurn(hf, version=3), hf.tokenizer)
    assert traj.finish_reason == "answer" and len(traj.token_versions) == len(traj.response_ids)
    turn = -1
    for start, end, model in segments(traj.loss_mask):
        if model:
            turn += 1
            n = end - start
            assert traj.token_versions[start:end] == [3 + turn] * min(2, n) + [4 + turn] * max(0, n - 2)
        else:  # the template and tool tokens after a turn take its last token's version
            assert traj.token_versions[start:end] == [traj.token_versions[start - 1]] * (end - start)
