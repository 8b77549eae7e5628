"""The HF sampler's batched draw: inverse-CDF sampling from one uniform per row, greedy rows, broken rows."""

from __future__ import annotations

import math

import pytest
import torch

from toolgym.agents._hf_rows import Row, draw, pick_tokens
from toolgym.agents.sampling import SamplingParams


def _logits(probs: list[float]) -> torch.Tensor:
    return torch.tensor([[math.log(p) if p > 0 else float("-inf") for p in probs]])


def test_a_grid_of_uniforms_lands_on_each_token_in_proportion_to_its_probability():
    probs = [0.1, 0.0, 0.6, 0.3]
    n = 1000
    logits = _logits(probs).expand(n, -1)
    uniforms = [(i + 0.5) / n for i in range(n)]
    tok, lp = pick_tokens(logits, [SamplingParams(seed=0)] * n, uniforms)
    counts = torch.bincount(tok, minlength=4).tolist()
    assert counts == [100, 0, 600, 300]
    assert lp.tolist() == pytest.approx([math.log(probs[t]) for t in tok.tolist()], abs=1e-6)


def test_the_ends_of_the_unit_interval_never_pick_a_token_of_probability_zero():
    logits = _logits([0.0, 0.5, 0.5, 0.0]).expand(2, -1)
    below_one = float(torch.nextafter(torch.tensor(1.0), torch.tensor(0.0)))
    tok, _ = pick_tokens(logits, [SamplingParams()] * 2, [0.0, below_one])
    assert tok.tolist() == [1, 2]


def test_temperature_top_k_and_greedy_rows_share_one_batch():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]] * 3)
    params = [SamplingParams(temperature=0), SamplingParams(top_k=1), SamplingParams(temperature=2.0)]
    # the greedy row ignores its uniform; top-k 1 leaves one token whatever the uniform; at T=2 the last uniform
    # lands past the mass of tokens 0-2, on token 3
    scaled = torch.softmax(logits[2] / 2.0, -1)
    u = float(scaled[:3].sum()) + 0.5 * float(scaled[3])
    tok, lp = pick_tokens(logits, params, [0.99, 0.99, u])
    assert tok.tolist() == [0, 0, 3]
    assert lp[1].item() == 0.0
    assert lp[2].item() == pytest.approx(math.log(float(scaled[3])), abs=1e-6)


def test_a_row_with_a_broken_distribution_fails_alone():
    rows = [Row([1], SamplingParams(seed=s, max_tokens=4), 0, 4, frozenset(), frozenset()) for s in (1, 2)]
    logits = torch.tensor([[0.0, 1.0, 2.0], [float("nan")] * 3])
    draw(logits, rows)
    assert len(rows[0].tokens) == 1 and rows[0].error is None
    assert rows[1].tokens == [] and "not finite" in str(rows[1].error)


def test_a_seeded_row_draws_the_same_uniforms_whatever_shares_its_batch():
    def first_tokens(batch: int) -> list[int]:
        rows = [Row([1], SamplingParams(seed=7 + (b > 0), max_tokens=8), 0, 8, frozenset(), frozenset())
                for b in range(batch)]
        logits = torch.zeros(batch, 50)  # uniform over 50 tokens: the token is the uniform, bucketed
        for _ in range(8):
            draw(logits, rows)
        return rows[0].tokens

    assert first_tokens(1) == first_tokens(5)
