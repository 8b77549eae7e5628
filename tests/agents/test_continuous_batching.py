"""Continuous batching in HFSampler: rows join the running decode loop at the next step and leave when they end
or are cancelled, with per-row parameters, seeds and exact behaviour log-probs kept, and one row's failure
contained. Driven deterministically through the scheduler's step hook (no timing)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import threading

import pytest
import torch

from toolgym.agents._decode_batch import supports_merging
from toolgym.agents.hf_sampler import HFSampler
from toolgym.agents.sampling import SamplerError, SamplingParams


def _ids(sampler: HFSampler, text: str) -> list[int]:
    return sampler.tokenizer(text, add_special_tokens=False)["input_ids"]


class Trace:
    """What each decode step did: for every row that got a token, its request's future, its token count and
    whether it ended. Installed as the scheduler's step hook; steps count from 1 after it is installed, and
    `at[step]` runs on the engine thread after that step."""

    def __init__(self, sampler: HFSampler) -> None:
        self.queue = sampler._queue
        self.base = self.queue.steps
        self.steps: list[tuple[int, list[tuple[concurrent.futures.Future, int, bool]]]] = []
        self.at: dict[int, object] = {}
        self.queue.step_hook = self

    def now(self) -> int:
        return self.queue.steps - self.base

    def __call__(self, step: int, rows: list) -> None:
        step -= self.base
        self.steps.append((step, [(r.ticket.future, len(r.tokens), r.ended) for r in rows]))
        if step in self.at:
            self.at[step]()  # type: ignore[operator]

    def first_token_step(self, fut: concurrent.futures.Future) -> int:
        return min(s for s, rows in self.steps for f, n, _ in rows if f is fut and n >= 1)

    def end_step(self, fut: concurrent.futures.Future) -> int:
        return max(s for s, rows in self.steps for f, _, ended in rows if f is fut and ended)

    def last_step(self, fut: concurrent.futures.Future) -> int:
        return max(s for s, rows in self.steps for f, _, _ in rows if f is fut)

    def max_rows(self) -> int:
        return max(len(rows) for _, rows in self.steps)


@pytest.fixture
def sampler(tiny_dir):
    s = HFSampler(str(tiny_dir))
    s.eos_token_ids = set()  # rows run to max_tokens, so "long" and "short" are exact
    return s


def _alone(sampler: HFSampler, prompt: list[int], params: SamplingParams):
    return sampler.generate([prompt], params)[0]


def test_the_tiny_models_decode_continuously_and_static_stays_selectable(tiny_dir):
    assert HFSampler(str(tiny_dir)).batching == "continuous"
    assert HFSampler(str(tiny_dir), batching="static").batching == "static"
    with pytest.raises(ValueError):
        HFSampler(str(tiny_dir), batching="dynamic")


def test_a_sliding_window_cache_falls_back_to_static_batching(tiny_dir):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, use_sliding_window=True, sliding_window=8, max_window_layers=0)
    model = Qwen2ForCausalLM(cfg)
    assert not supports_merging(model)  # its sliding-window layers cannot be padded and concatenated
    assert HFSampler(model).batching == "static"
    with pytest.raises(ValueError, match="static"):
        HFSampler(model, batching="continuous")


def test_a_request_arriving_mid_decode_starts_at_the_next_step_and_finishes_first(sampler):
    long_p, short_p = _ids(sampler, "The quick brown fox"), _ids(sampler, "What is 2 + 3?")
    long_sp = SamplingParams(max_tokens=40, seed=1, temperature=0.9)
    short_sp = SamplingParams(max_tokens=3, seed=2, top_k=20)
    long_alone, short_alone = _alone(sampler, long_p, long_sp), _alone(sampler, short_p, short_sp)
    trace, N, late = Trace(sampler), 5, {}
    trace.at[N] = lambda: late.setdefault("short", sampler._queue.enqueue(short_p, short_sp))
    long_fut = sampler._queue.enqueue(long_p, long_sp)
    long_out = long_fut.result(timeout=120)
    short_fut = late["short"]
    short_out = short_fut.result(timeout=120)
    assert trace.first_token_step(short_fut) <= N + 1  # it did not wait for the long row
    assert trace.end_step(short_fut) < trace.end_step(long_fut)  # and left while the long row went on
    assert trace.max_rows() == 2
    # the same tokens as alone, whatever shared the batch; log-probs equal up to float reduction order
    for got, want in ((long_out, long_alone), (short_out, short_alone)):
        assert got[0].token_ids == want[0].token_ids
        assert got[0].logprobs == pytest.approx(want[0].logprobs, abs=1e-4)
    assert len(long_out[0].token_ids) == 40 and len(short_out[0].token_ids) == 3


def test_a_row_that_joins_mid_decode_has_the_log_probs_of_its_own_context(sampler):
    """The merged, left-padded cache must give the joiner's logits exactly (positions, mask): recompute them."""
    first, joiner = _ids(sampler, "0123 0123 0123 0123 0123"), _ids(sampler, "hello")
    trace, late = Trace(sampler), {}
    trace.at[7] = lambda: late.setdefault("j", sampler._queue.enqueue(joiner, SamplingParams(max_tokens=12, seed=4)))
    sampler._queue.enqueue(first, SamplingParams(max_tokens=24, seed=3)).result(timeout=120)
    (s,) = late["j"].result(timeout=120)
    with torch.no_grad():
        logp = torch.log_softmax(sampler.model(torch.tensor([joiner + s.token_ids])).logits[0].float(), -1)
    want = [float(logp[len(joiner) + i - 1, t]) for i, t in enumerate(s.token_ids)]
    assert s.logprob_kind == "model"
    assert s.logprobs == pytest.approx(want, abs=1e-4)


def test_rows_leaving_free_their_slot_for_waiting_rows(tiny_dir):
    s = HFSampler(str(tiny_dir), max_batch_size=2)
    s.eos_token_ids = set()
    trace = Trace(s)
    prompts = [_ids(s, t) for t in ("The quick brown fox", "What is", "0123")]
    a = s._queue.enqueue(prompts[0], SamplingParams(max_tokens=30, seed=0))
    b = s._queue.enqueue(prompts[1], SamplingParams(max_tokens=4, seed=1))
    c = s._queue.enqueue(prompts[2], SamplingParams(max_tokens=4, seed=2))
    for f in (a, b, c):
        f.result(timeout=120)
    assert trace.max_rows() == 2  # the cap holds
    assert trace.first_token_step(c) == trace.end_step(b) + 1  # c took b's slot at the very next step
    assert trace.end_step(c) < trace.end_step(a)  # while a still decoded


def test_rows_of_one_request_share_their_prompt_and_keep_their_own_seeds(sampler):
    p = _ids(sampler, "What is 2 + 3?")
    sp = SamplingParams(n=3, max_tokens=10, seed=7)
    alone = sampler.generate([p], sp)[0]
    trace, late = Trace(sampler), {}
    trace.at[3] = lambda: late.setdefault("g", sampler._queue.enqueue(p, sp))
    sampler._queue.enqueue(_ids(sampler, "The quick brown fox"), SamplingParams(max_tokens=20, seed=0)).result(120)
    group = late["g"].result(timeout=120)
    assert [x.token_ids for x in group] == [x.token_ids for x in alone]
    assert len({tuple(x.token_ids) for x in group}) > 1  # three distinct samples, not one prefill copied


def test_a_cancelled_request_leaves_the_batch_at_the_next_step(tiny_dir):
    s = HFSampler(str(tiny_dir), max_batch_size=1)  # one slot: the short request can only run once the long one left
    s.eos_token_ids = set()
    trace, started = Trace(s), threading.Event()
    trace.at[3] = started.set
    long_p, short_p = _ids(s, "The quick brown fox"), _ids(s, "What is")

    async def cancel_the_long_one():
        task = asyncio.create_task(s.agenerate([long_p], SamplingParams(max_tokens=500, seed=0)))
        await asyncio.to_thread(started.wait, 60)
        task.cancel()  # what an episode's wall-time limit does
        await asyncio.gather(task, return_exceptions=True)
        for _ in range(3):  # let the cancellation reach the request's future
            await asyncio.sleep(0)
        at_cancel = trace.now()
        out = await asyncio.wait_for(s.agenerate([short_p], SamplingParams(max_tokens=3, seed=1)), timeout=60)
        return task, at_cancel, out

    task, at_cancel, out = asyncio.run(cancel_the_long_one())
    assert task.cancelled()
    assert len(out[0][0].token_ids) == 3
    long_fut = trace.steps[0][1][0][0]
    assert trace.last_step(long_fut) <= at_cancel + 1  # gone at the next step, not after its 500 tokens
    assert max(n for _, rows in trace.steps for f, n, _ in rows if f is long_fut) < 500


def test_a_request_cancelled_while_it_waits_for_a_slot_never_runs(tiny_dir):
    s = HFSampler(str(tiny_dir), max_batch_size=1)
    s.eos_token_ids = set()
    trace, late = Trace(s), {}

    def enqueue_and_cancel() -> None:  # on the engine thread, between two steps: deterministic
        late["x"] = s._queue.enqueue(_ids(s, "What is"), SamplingParams(max_tokens=5, seed=1))
        late["x"].cancel()
        late["y"] = s._queue.enqueue(_ids(s, "0123"), SamplingParams(max_tokens=2, seed=2))

    trace.at[2] = enqueue_and_cancel
    s._queue.enqueue(_ids(s, "The quick brown fox"), SamplingParams(max_tokens=8, seed=0)).result(timeout=120)
    assert len(late["y"].result(timeout=120)[0].token_ids) == 2
    assert late["x"].cancelled()
    assert all(f is not late["x"] for _, rows in trace.steps for f, _, _ in rows)


def test_one_rows_failure_does_not_poison_the_others(sampler):
    tok = sampler.tokenizer
    raise_tok, nan_tok = tok.convert_tokens_to_ids("<|im_start|>"), tok.convert_tokens_to_ids("<|endoftext|>")

    def raise_on_prefill(module, args, kwargs):  # a prompt the model cannot take (out of memory, say)
        ids = kwargs["input_ids"]
        if ids.shape[1] > 1 and bool((ids == raise_tok).any()):
            raise RuntimeError("simulated prefill failure")

    def nan_logits(module, args, kwargs, out):  # a row whose distribution is broken
        ids = kwargs["input_ids"]
        if ids.shape[1] > 1:
            out.logits[(ids == nan_tok).any(1)] = float("nan")

    running, ok_p = _ids(sampler, "What is 2 + 3?"), _ids(sampler, "0123")
    raise_p, nan_p = _ids(sampler, "the quick") + [raise_tok], _ids(sampler, "the lazy") + [nan_tok]
    assert not {raise_tok, nan_tok} & set(running + ok_p)
    sp = SamplingParams(max_tokens=16, seed=5)
    want_running, want_ok = _alone(sampler, running, sp), _alone(sampler, ok_p, sp)
    h1 = sampler.model.register_forward_pre_hook(raise_on_prefill, with_kwargs=True)
    h2 = sampler.model.register_forward_hook(nan_logits, with_kwargs=True)
    try:
        trace, late = Trace(sampler), {}

        def join_four() -> None:  # they all arrive at one step, while `running` decodes
            for k, p in (("raise", raise_p), ("nan", nan_p), ("ok", ok_p), ("bad", [1, sampler.vocab_size + 5])):
                late[k] = sampler._queue.enqueue(p, sp)

        trace.at[4] = join_four
        got_running = sampler._queue.enqueue(running, sp).result(timeout=120)
        got_ok = late["ok"].result(timeout=120)
        with pytest.raises(SamplerError, match="simulated prefill failure"):
            late["raise"].result(timeout=120)
        with pytest.raises(SamplerError, match="not finite|probability"):
            late["nan"].result(timeout=120)
        with pytest.raises(SamplerError, match="outside the model's vocabulary"):
            late["bad"].result(timeout=120)
    finally:
        h1.remove()
        h2.remove()
    assert got_running[0].token_ids == want_running[0].token_ids
    assert got_ok[0].token_ids == want_ok[0].token_ids
    assert all(math.isfinite(x) for x in got_ok[0].logprobs)
    assert trace.first_token_step(late["ok"]) == 5


def test_a_failed_decode_step_fails_its_rows_and_the_loop_goes_on(sampler):
    calls = {"n": 0}

    def fail_third_decode(module, args, kwargs):
        if kwargs["input_ids"].shape[1] == 1:
            calls["n"] += 1
            if calls["n"] == 3:
                raise RuntimeError("simulated device fault")

    h = sampler.model.register_forward_pre_hook(fail_third_decode, with_kwargs=True)
    try:
        fut = sampler._queue.enqueue(_ids(sampler, "What is"), SamplingParams(max_tokens=10, seed=0))
        with pytest.raises(SamplerError, match="simulated device fault"):
            fut.result(timeout=120)
    finally:
        h.remove()
    out = sampler.generate([_ids(sampler, "0123")], SamplingParams(max_tokens=4, seed=0))
    assert len(out[0][0].token_ids) == 4


@pytest.mark.device_standin
def test_continuous_decode_on_the_device(tiny_dir, device):
    """The join/step/leave loop on an accelerator (CUDA, or the CPU stand-in that refuses what CUDA refuses):
    the cache stays on the device, and the tokens are those of the CPU run."""
    from transformers import AutoModelForCausalLM

    from tests.device_standin import on_device

    def run(s: HFSampler) -> tuple[list, list, list[bool]]:
        s.eos_token_ids = set()
        trace, late, where = Trace(s), {}, []
        trace.at[3] = lambda: late.setdefault("j", s._queue.enqueue(_ids(s, "hello"), SamplingParams(max_tokens=5, seed=2)))
        trace.at[5] = lambda: where.extend(on_device(layer.keys) for layer in s._queue._engine.cache.layers)
        first = s._queue.enqueue(_ids(s, "The quick brown fox"), SamplingParams(n=2, max_tokens=12, seed=1, top_p=0.9))
        return first.result(timeout=300), late["j"].result(timeout=300), where

    cpu_first, cpu_late, cpu_where = run(HFSampler(str(tiny_dir)))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_dir)).to(device)
    dev = HFSampler(model, cpu_tokenizer := HFSampler(str(tiny_dir)).tokenizer)
    assert dev.batching == "continuous" and cpu_tokenizer is dev.tokenizer
    dev_first, dev_late, dev_where = run(dev)
    assert dev_where and all(dev_where) and not any(cpu_where)
    for got, want in ((dev_first, cpu_first), (dev_late, cpu_late)):
        assert [x.token_ids for x in got] == [x.token_ids for x in want]
        for g, w in zip(got, want, strict=True):
            assert g.logprobs == pytest.approx(w.logprobs, abs=1e-4)


def test_a_request_cancelled_before_the_loop_starts_never_runs(sampler):
    # A time limit can cancel a request in the one loop iteration it waits for others to join its prefill; its
    # rows must not then decode for nobody, and the loop must still serve the next request.
    trace = Trace(sampler)
    prompt = _ids(sampler, "hello")

    async def cancel_first_then_ask_again():
        first = asyncio.create_task(sampler.agenerate([prompt], SamplingParams(max_tokens=50, seed=0)))
        while not sampler._queue._pending:  # until the first request is queued and yields, waiting for others
            await asyncio.sleep(0)
        first.cancel()
        second = await asyncio.wait_for(sampler.agenerate([prompt], SamplingParams(max_tokens=2, seed=1)), 60)
        return first, second

    first, second = asyncio.run(cancel_first_then_ask_again())
    assert first.cancelled() and len(second[0][0].token_ids) == 2
    ran = [(f, n) for _, rows in trace.steps for f, n, _ in rows]
    assert len({f for f, _ in ran}) == 1 and max(n for _, n in ran) == 2  # only the second request's row ran
