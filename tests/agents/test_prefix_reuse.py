"""Prefix reuse across turns: the next turn of an episode forwards only its new tokens, with the log-probs of a
whole prefill, and never reuses a cache computed with other weights."""

from __future__ import annotations

import pytest
import torch

from toolgym.agents.hf_sampler import HFSampler
from toolgym.agents.sampling import SamplingParams

SP = SamplingParams(max_tokens=10, seed=3)


def _ids(s: HFSampler, text: str) -> list[int]:
    return s.tokenizer(text, add_special_tokens=False)["input_ids"]


def _prefill_widths(s: HFSampler) -> tuple[list[int], object]:
    widths: list[int] = []

    def record(module, args, kwargs):
        if kwargs["input_ids"].shape[1] > 1 or not widths:  # prefills (a one-token prompt rest counts too)
            widths.append(int(kwargs["input_ids"].shape[1]))

    return widths, s.model.register_forward_pre_hook(record, with_kwargs=True)


def _two_turns(s: HFSampler) -> tuple[list[int], list, list]:
    first = _ids(s, "The quick brown fox jumps over the lazy dog. What is 2 + 3?")
    s.eos_token_ids = set()  # fixed-length turns: the second prompt continues a row that ran to its limit
    a = s.generate([first], SP)[0][0]
    second = first + a.token_ids + _ids(s, " Now add four.")
    b = s.generate([second], SP)[0][0]
    return second, a, b


def test_the_next_turn_forwards_only_its_new_tokens_with_the_log_probs_of_a_whole_prefill(tiny_dir):
    plain = HFSampler(str(tiny_dir), prefix_cache_mb=0)
    reuse = HFSampler(plain.model, plain.tokenizer)
    second, a0, b0 = _two_turns(plain)
    widths, h = _prefill_widths(reuse)
    try:
        _, a1, b1 = _two_turns(reuse)
    finally:
        h.remove()
    assert reuse.prefix_store.hits == 1
    kept = len(second) - len(_ids(reuse, " Now add four.")) - 1  # turn one's prompt and answer, but its last token
    assert widths[-1] == len(second) - kept  # the last token of turn one and the new user text
    assert (a1.token_ids, b1.token_ids) == (a0.token_ids, b0.token_ids)
    assert b1.logprobs == pytest.approx(b0.logprobs, abs=1e-4)


def test_changed_weights_empty_the_store(tiny_dir):
    s = HFSampler(str(tiny_dir))
    first = _ids(s, "The quick brown fox jumps over the lazy dog.")
    s.eos_token_ids = set()
    a = s.generate([first], SP)[0][0]
    assert s.prefix_store.entries
    with torch.no_grad():  # an optimizer step on the module the sampler runs: in place
        next(s.model.parameters()).mul_(1.01)
    s.generate([first + a.token_ids + _ids(s, " More.")], SP)
    assert s.prefix_store.hits == 0
