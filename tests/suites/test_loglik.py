"""Packed, batched log-likelihood scoring equals the one-choice-at-a-time reference."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from toolgym.suites.loglik import (  # noqa: E402
    LoglikScorer,
    MCItem,
    arc_context,
    decide,
    encode_pair,
    naive_loglik,
    score_naive,
)

ITEMS = [
    MCItem("q1", arc_context("Which gas do plants absorb from the air?"),
           ["oxygen", "carbon dioxide", "nitrogen", "helium"], 1),
    MCItem("q2", arc_context("What is the boiling point of water at sea level?"),
           ["100 degrees Celsius", "0 degrees", "50 degrees Celsius and a very long distractor"], 0),
    MCItem("q3", arc_context("Energy?"), ["is conserved", "fox"], 0),
    MCItem("q4", arc_context("A question whose prompt is noticeably longer than the others, to force padding"),
           ["A", "B", "C", "D", "E"], 4),
]


def test_encode_pair_follows_the_harness_split(tiny_lm) -> None:
    _, tok = tiny_lm
    ctx, cont = encode_pair(tok, "Question: x\nAnswer:", " carbon dioxide")
    whole = tok("Question: x\nAnswer: carbon dioxide", add_special_tokens=False)["input_ids"]
    assert ctx == tok("Question: x\nAnswer:", add_special_tokens=False)["input_ids"]
    assert ctx + cont == whole[: len(ctx)] + whole[len(ctx):]
    # trailing whitespace of the context moves into the continuation
    ctx2, cont2 = encode_pair(tok, "Question: x\nAnswer: ", "carbon dioxide")
    assert (ctx2, cont2) == (ctx, cont)


def test_naive_loglik_is_a_sum_of_token_logprobs(tiny_lm) -> None:
    import torch

    model, tok = tiny_lm
    ctx, cont = encode_pair(tok, ITEMS[0].context, " oxygen")
    total = 0.0
    for i, t in enumerate(cont):  # one forward per token: an independent computation
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ctx + cont[:i]])).logits[0, -1]
        total += float(torch.log_softmax(logits.float(), -1)[t])
    assert naive_loglik(model, ctx, cont) == pytest.approx(total, abs=1e-4)


@pytest.mark.parametrize("batch", [1, 3, 8])
def test_packed_scores_equal_naive(tiny_lm, batch: int) -> None:
    model, tok = tiny_lm
    ref = score_naive(model, tok, ITEMS)
    got = LoglikScorer(model, tok, batch_questions=batch).score(ITEMS)
    assert [g.id for g in got] == [r.id for r in ref]
    for g, r in zip(got, ref, strict=True):
        assert len(g.logliks) == len(r.logliks)
        assert max(abs(a - b) for a, b in zip(g.logliks, r.logliks, strict=True)) < 1e-4
        assert (g.pred, g.pred_norm) == (r.pred, r.pred_norm)


def test_decide_acc_and_acc_norm() -> None:
    # raw: choice 0 wins (-4 > -6); normalized by characters: -4/1 = -4 vs -6/12 = -0.5 -> choice 1
    s = decide("x", [-4.0, -6.0], ["a", "abcdefghijkl"], gold=1)
    assert (s.pred, s.pred_norm, s.acc, s.acc_norm) == (0, 1, 0.0, 1.0)
    tie = decide("y", [-1.0, -1.0], ["ab", "cd"], gold=0)
    assert tie.pred == 0 and tie.acc == 1.0
