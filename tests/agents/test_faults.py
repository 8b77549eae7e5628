"""Faults and bad input end one episode with a recorded reason and never lose the group.

HTTP faults are real: a local completion server on 127.0.0.1 (tests/agents/completion_server.py)
answers 500, answers too slowly, or answers with an empty completion."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from tests.agents.completion_server import CompletionServer
from tests.agents.helpers import AsyncToolEchoEnv, ToolEchoEnv
from toolgym.agents.chat import ChatTemplate
from toolgym.agents.hf_sampler import HFSampler
from toolgym.agents.openai_sampler import OpenAISampler
from toolgym.agents.runner import EpisodeLimits, RolloutRunner
from toolgym.agents.sampling import SamplerError, SamplingParams


@pytest.fixture(scope="module")
def hf(tiny_dir):
    return HFSampler(str(tiny_dir))


@pytest.fixture()
def server(hf):
    with CompletionServer(hf) as srv:
        yield srv


def _runner(sampler, tpl, env_factory=lambda: ToolEchoEnv(turns=3), **lim):
    return RolloutRunner(sampler, tpl, env_factory, SamplingParams(max_tokens=8),
                         EpisodeLimits(**{"max_turns": 4, "max_total_tokens": 800, **lim}), seed=1)


def test_openai_sampler_token_ids_and_logprobs_match_the_model(hf, server):
    client = OpenAISampler(server.url, "tiny")
    prompt = hf.tokenizer("What is 2 + 3?", add_special_tokens=False)["input_ids"]
    params = SamplingParams(n=2, max_tokens=6, seed=4)
    remote = client.generate([prompt], params)[0]
    local = hf.generate([prompt], params)[0]
    assert [s.token_ids for s in remote] == [s.token_ids for s in local]
    assert [s.logprobs for s in remote] == [s.logprobs for s in local]
    assert remote[0].logprob_kind == "model"


def test_server_500_is_retried_with_backoff(hf, server):
    server.fail_first = 2  # FAULT: the server answers HTTP 500 twice
    client = OpenAISampler(server.url, "tiny", backoff_s=0.01)
    prompt = hf.tokenizer("hello", add_special_tokens=False)["input_ids"]
    out = client.generate([prompt], SamplingParams(max_tokens=4, seed=0))
    assert len(out[0][0].token_ids) >= 1
    assert client.retries == 2 and server.requests == 3


def test_server_500_forever_is_recorded_on_every_trajectory_of_the_group(hf, server):
    server.always_fail = True  # FAULT: the server answers HTTP 500 to everything
    client = OpenAISampler(server.url, "tiny", max_retries=1, backoff_s=0.01)
    (group,) = _runner(client, ChatTemplate(hf.tokenizer)).run([5], group_size=3)
    assert len(group) == 3
    for t in group:
        assert t.finish_reason == "error" and "HTTP 500" in t.error
        assert t.prompt_ids and t.response_ids == [] and t.loss_mask == []


@pytest.mark.slow
def test_server_timeout_is_recorded(hf, server):
    server.delay_s = 1.0  # FAULT: the server answers after the client's timeout
    client = OpenAISampler(server.url, "tiny", max_retries=1, timeout_s=0.2, backoff_s=0.01)
    (group,) = _runner(client, ChatTemplate(hf.tokenizer)).run([1], group_size=2)
    assert [t.finish_reason for t in group] == ["error", "error"]
    assert all("Timeout" in t.error for t in group)


def test_unreachable_server_raises_sampler_error(hf):
    client = OpenAISampler("http://127.0.0.1:9/v1", "tiny", max_retries=1, backoff_s=0.01, timeout_s=1)
    with pytest.raises(SamplerError, match="failed after 2 attempts"):
        client.generate([[1, 2, 3]], SamplingParams(max_tokens=2))


def test_empty_completions_are_recorded_and_the_episode_goes_on(hf, server):
    server.empty = True  # FAULT: the server returns a completion with no tokens
    client = OpenAISampler(server.url, "tiny")
    (group,) = _runner(client, ChatTemplate(hf.tokenizer)).run([2], group_size=2)
    for t in group:
        assert t.error is None and t.finish_reason == "answer"
        assert t.metadata["empty_turns"] == 3
        assert sum(t.loss_mask) == 0  # nothing was sampled, so nothing is trained on
        assert [m["content"] for m in t.turns if m["role"] == "assistant"] == ["", "", ""]


def test_prompt_over_the_context_is_cut_and_marked(tiny_dir):
    small = HFSampler(str(tiny_dir), max_model_len=40)
    (group,) = _runner(small, ChatTemplate(small.tokenizer), max_total_tokens=40).run([3], group_size=2)
    for t in group:
        assert t.metadata["prompt_truncated_from"] > 40 - 8
        assert len(t.prompt_ids) == 40 - 8
        assert len(t.prompt_ids) + len(t.response_ids) <= 40
        assert t.finish_reason in ("max_tokens", "context_overflow")


def test_context_filling_up_mid_episode_truncates_and_marks(hf):
    tpl = ChatTemplate(hf.tokenizer)
    prompt_len = len(tpl.prompt_ids(*ToolEchoEnv().reset(seed=3)[:1], [ToolEchoEnv().reset(seed=3)[1]["tools"][0]]))
    (group,) = _runner(hf, tpl, max_total_tokens=prompt_len + 12).run([3], group_size=2)
    for t in group:
        assert t.error is None
        assert t.finish_reason in ("context_overflow", "max_tokens")
        assert len(t.prompt_ids) + len(t.response_ids) <= prompt_len + 12
        assert len(t.loss_mask) == len(t.response_ids) == len(t.behavior_logprobs)


def test_a_tool_raising_fails_only_its_episode(hf):
    counter = itertools.count()

    def factory():  # every second env's tool raises on its second step
        return ToolEchoEnv(turns=3, raise_on_turn=2 if next(counter) % 2 else None)

    (group,) = _runner(hf, ChatTemplate(hf.tokenizer), env_factory=factory).run([7], group_size=4)
    assert len(group) == 4
    failed = [t for t in group if t.finish_reason == "error"]
    ok = [t for t in group if t.finish_reason == "answer"]
    assert len(failed) == 2 and len(ok) == 2
    for t in failed:
        assert "the calc tool crashed" in t.error
        assert sum(t.loss_mask) > 0  # the turns before the crash are kept
        assert len(t.loss_mask) == len(t.response_ids) == len(t.behavior_logprobs)


def test_wall_time_limit_ends_a_slow_episode(hf):
    # an environment call that stalls is the program's timeout: reward 0, counted (not masked like "timeout")
    (group,) = _runner(hf, ChatTemplate(hf.tokenizer), env_factory=lambda: AsyncToolEchoEnv(turns=3, tool_latency_s=5),
                       max_wall_s=0.5).run([1], group_size=2)
    assert [t.finish_reason for t in group] == ["time_limit", "time_limit"]
    assert all("own environment time" in t.error and t.reward == 0.0 for t in group)


@pytest.mark.slow
def test_waiting_for_the_sampler_does_not_count_against_the_wall_time_limit(tiny_dir):
    # 24 episodes share a sampler that runs one row per forward pass, so each waits for the others' tokens:
    # seconds of sampling per episode against a 0.3 s limit that only its environment time counts against
    one_row = HFSampler(str(tiny_dir), max_batch_size=1)
    runner = RolloutRunner(one_row, ChatTemplate(one_row.tokenizer), lambda: ToolEchoEnv(turns=3),
                           SamplingParams(max_tokens=24), EpisodeLimits(max_turns=4, max_total_tokens=800, max_wall_s=0.3),
                           seed=1)
    (group,) = runner.run([3], group_size=24)
    assert max(t.timings["total_s"] for t in group) > 1.0  # the limit would have ended them
    assert not [t.error for t in group if t.finish_reason in ("timeout", "time_limit")]
    assert all(t.timings["env_s"] < 0.3 for t in group)
    limited = RolloutRunner(one_row, ChatTemplate(one_row.tokenizer), lambda: ToolEchoEnv(turns=3),
                            SamplingParams(max_tokens=24),
                            EpisodeLimits(max_turns=4, max_total_tokens=800, max_sample_s=0.001), seed=1)
    (group,) = limited.run([3], group_size=4)
    assert {t.finish_reason for t in group} == {"timeout"} and all("sampling call" in t.error for t in group)
    # the abandoned requests still run on the sampler's thread: a request queued behind them returns once they are done
    assert one_row.generate([group[0].prompt_ids], SamplingParams(max_tokens=1))[0][0].token_ids


def test_a_request_cancelled_while_its_batch_forms_does_not_stall_the_sampler(tiny_dir):
    # A timeout can cancel the first request of a batch in the one loop iteration the queue waits for others to
    # join; the queue is then marked busy, and if nobody drained it every later request would wait forever.
    from toolgym.agents._batching import BatchQueue

    sampler = HFSampler(str(tiny_dir))
    queue = BatchQueue(sampler._run_batch)  # the HF sampler's own engine call behind a fresh queue
    prompt = sampler.tokenizer("hello", add_special_tokens=False)["input_ids"]
    params = SamplingParams(max_tokens=2, seed=0)

    async def cancel_first_then_ask_again():
        first = asyncio.create_task(queue.submit(prompt, params))
        await asyncio.sleep(0)  # the first request is queued and yields once, waiting for others to join
        first.cancel()
        return await asyncio.wait_for(queue.submit(prompt, params), timeout=60)

    samples = asyncio.run(cancel_first_then_ask_again())
    assert samples[0].token_ids
