"""HFSampler on a tiny config-built model: shapes, seeds, stops, limits, truncated log-probs, batching."""

from __future__ import annotations

import asyncio
import math

import pytest
import torch

from toolgym.agents.hf_sampler import HFSampler
from toolgym.agents.sampling import ContextOverflow, SamplingParams


@pytest.fixture(scope="module")
def sampler(tiny_dir):
    return HFSampler(str(tiny_dir))


def _prompt(sampler: HFSampler, text: str = "What is 2 + 3?") -> list[int]:
    return sampler.tokenizer(text, add_special_tokens=False)["input_ids"]


def test_params_validate_and_name_their_distribution():
    with pytest.raises(ValueError):
        SamplingParams(n=0)
    with pytest.raises(ValueError):
        SamplingParams(top_p=0)
    assert SamplingParams().logprob_kind() == "model"
    assert SamplingParams(top_k=5).logprob_kind() == "processed"
    assert SamplingParams(top_p=0.9).truncated
    assert SamplingParams(temperature=0.7).logprob_kind() == "processed"
    assert SamplingParams(temperature=0).logprob_kind() == "greedy"


def test_n_samples_with_aligned_logprobs(sampler):
    out = sampler.generate([_prompt(sampler), _prompt(sampler, "hello")], SamplingParams(n=3, max_tokens=12, seed=1))
    assert [len(o) for o in out] == [3, 3]
    for group in out:
        for s in group:
            assert 1 <= len(s.token_ids) <= 12
            assert len(s.logprobs) == len(s.token_ids)
            assert all(lp <= 0 and math.isfinite(lp) for lp in s.logprobs)
            assert s.finish_reason in ("stop", "length")
            if s.finish_reason == "length":
                assert len(s.token_ids) == 12


def test_seed_reproduces_and_differs(sampler):
    p = _prompt(sampler)
    a = sampler.generate([p], SamplingParams(n=2, max_tokens=16, seed=7))[0]
    b = sampler.generate([p], SamplingParams(n=2, max_tokens=16, seed=7))[0]
    c = sampler.generate([p], SamplingParams(n=2, max_tokens=16, seed=8))[0]
    assert [s.token_ids for s in a] == [s.token_ids for s in b]
    assert [s.token_ids for s in a] != [s.token_ids for s in c]


def test_top_k_one_is_greedy_with_renormalized_logprob_zero(sampler):
    p = _prompt(sampler)
    s = sampler.generate([p], SamplingParams(top_k=1, max_tokens=8, seed=3))[0][0]
    g = sampler.generate([p], SamplingParams(temperature=0, max_tokens=8))[0][0]
    assert s.token_ids == g.token_ids
    assert s.logprob_kind == "processed"
    # the truncated, renormalized distribution puts all mass on the one kept token
    assert all(abs(lp) < 1e-6 for lp in s.logprobs)


def test_top_p_logprobs_are_of_the_renormalized_distribution(sampler):
    p = _prompt(sampler)
    full = sampler.generate([p], SamplingParams(max_tokens=1, seed=5))[0][0]
    cut = sampler.generate([p], SamplingParams(top_p=0.5, max_tokens=1, seed=5))[0][0]
    with torch.no_grad():
        logits = sampler.model(torch.tensor([p])).logits[0, -1].float()
    logp = torch.log_softmax(logits, -1)
    assert full.logprobs[0] == pytest.approx(float(logp[full.token_ids[0]]), abs=1e-4)
    # renormalized over the nucleus: log p(tok) - log(mass of the nucleus), which is >= the raw log-prob
    probs, order = torch.sort(logp.exp(), descending=True)
    keep = int(((probs.cumsum(0) - probs) < 0.5).sum())
    nucleus = set(order[:keep].tolist())
    assert cut.token_ids[0] in nucleus
    expected = float(logp[cut.token_ids[0]] - torch.logsumexp(logp[order[:keep]], 0))
    assert cut.logprobs[0] == pytest.approx(expected, abs=1e-4)


def test_stop_string_and_stop_ids_end_generation(sampler):
    p = _prompt(sampler)
    free = sampler.generate([p], SamplingParams(temperature=0, max_tokens=20))[0][0]
    assert len(free.token_ids) >= 3
    stop_id = free.token_ids[2]
    s = sampler.generate([p], SamplingParams(temperature=0, max_tokens=20, stop_token_ids=[stop_id]))[0][0]
    assert s.finish_reason == "stop" and s.stop_reason == stop_id
    assert s.token_ids[-1] == stop_id and len(s.token_ids) <= 3
    text = sampler.tokenizer.decode(free.token_ids[:4])
    piece = text[-2:] if len(text) >= 2 else text
    t = sampler.generate([p], SamplingParams(temperature=0, max_tokens=20, stop=[piece]))[0][0]
    assert t.finish_reason == "stop" and t.stop_reason == piece
    assert piece in sampler.tokenizer.decode(t.token_ids)  # the stop string's tokens are kept verbatim


def test_context_overflow_raises(sampler):
    long = [5] * (sampler.max_model_len + 1)
    with pytest.raises(ContextOverflow):
        sampler.generate([long], SamplingParams(max_tokens=4))


def test_concurrent_requests_are_batched_and_match_single_calls(sampler):
    prompts = [_prompt(sampler, t) for t in ("What is", "The quick brown fox", "0123")]
    params = [SamplingParams(max_tokens=10, seed=i, temperature=0.8 + 0.1 * i) for i in range(3)]
    single = [sampler.generate([p], sp)[0][0] for p, sp in zip(prompts, params, strict=False)]

    async def together():
        return await asyncio.gather(*(sampler.agenerate([p], sp) for p, sp in zip(prompts, params, strict=False)))

    batched = [o[0][0] for o in asyncio.run(together())]
    for a, b in zip(single, batched, strict=False):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_update_weights_changes_the_policy(tiny_dir):
    s = HFSampler(str(tiny_dir))
    p = _prompt(s)
    before = s.generate([p], SamplingParams(temperature=0, max_tokens=6))[0][0]
    sd = {k: torch.zeros_like(v) for k, v in s.model.state_dict().items() if k.endswith("lm_head.weight") or k.endswith("embed_tokens.weight")}
    s.update_weights(sd)
    after = s.generate([p], SamplingParams(max_tokens=6, seed=0))[0][0]
    # all-zero output embeddings: a uniform distribution, so every log-prob is -log(V)
    assert after.logprobs == pytest.approx([-math.log(s.model.config.vocab_size)] * len(after.logprobs), abs=1e-4)
    assert before.token_ids


@pytest.mark.parametrize("batching", ["continuous", "static"])
def test_autocast_covers_every_forward_in_the_decode_thread(tiny_dir, batching):
    s = HFSampler(str(tiny_dir), autocast="bf16", batching=batching)
    seen: list[tuple[bool, torch.dtype, torch.dtype]] = []

    def record(module, args, kwargs, out):  # in the sampler's worker thread, where autocast must be entered
        seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), out.logits.dtype))

    h = s.model.register_forward_hook(record, with_kwargs=True)
    try:
        out = s.generate([_prompt(s)], SamplingParams(max_tokens=6, seed=0))[0][0]
    finally:
        h.remove()
    assert len(seen) == len(out.token_ids) >= 1  # one prefill, then one decode step per further token
    assert all(on and dt == torch.bfloat16 for on, dt, _ in seen)
    assert all(math.isfinite(x) for x in out.logprobs)
    assert next(s.model.parameters()).dtype == torch.float32  # master weights untouched


def test_an_unknown_autocast_dtype_is_refused_before_loading(tiny_dir):
    with pytest.raises(ValueError, match="autocast must be one of"):
        HFSampler(str(tiny_dir), autocast="int8")
