"""Recipe A of the MOPD spec: the peer selector as a pure function."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from toolgym.training.algorithms.distillation.peers import (
    batch_contexts,
    build_context,
    peer_rng,
    select_peers,
    seq_mask,
)


def _group(k: int, n: int = 8) -> list[int]:
    """k successes spread over a group of n (successes at the even slots first)."""
    order = list(range(0, n, 2)) + list(range(1, n, 2))
    r = [0] * n
    for j in order[:k]:
        r[j] = 1
    return r


def test_contract_example() -> None:
    sel = select_peers(rewards=[1, 0, 1, 0], index=0, mode="contrastive", threshold=0.5, rng=random.Random(0))
    assert sel.successes == [2]
    assert sel.failures in ([1], [3])
    sel = select_peers(rewards=[1, 0, 1, 0], index=0, mode="positive", threshold=0.5, rng=random.Random(0))
    assert sel.successes == [2] and sel.failures == []


@pytest.mark.parametrize("k", [0, 1, 2, 7, 8])
@pytest.mark.parametrize("mode", ["positive", "contrastive"])
def test_groups_of_eight(k: int, mode: str) -> None:
    r = _group(k)
    s_all = [j for j in range(8) if r[j] == 1]
    f_all = [j for j in range(8) if r[j] == 0]
    rng = random.Random(1)
    for i in range(8):
        sel = select_peers(r, i, mode, 0.5, rng)
        s_other = [j for j in s_all if j != i]
        f_other = [j for j in f_all if j != i]
        assert sel.successes == s_other[:2]  # first success != i, then the next, in group order
        assert i not in sel.successes and i not in sel.failures
        if mode == "positive":
            assert sel.failures == []
        else:
            assert len(sel.failures) == (1 if f_other else 0)
            assert set(sel.failures) <= set(f_other)


# (k, rollout succeeded) -> (successes seen, failures seen) for 2S1F, n = 8
# (docs/algorithms/mopd.md, "Peer selection")
TABLE = {
    (0, False): (0, 1),
    (1, True): (0, 1),
    (1, False): (1, 1),
    (2, True): (1, 1),
    (2, False): (2, 1),
    (3, True): (2, 1),
    (6, True): (2, 1),
    (6, False): (2, 1),
    (7, True): (2, 1),
    (7, False): (2, 0),
    (8, True): (2, 0),
}


@pytest.mark.parametrize("key", sorted(TABLE))
def test_peer_count_table(key: tuple[int, bool]) -> None:
    k, success = key
    r = _group(k)
    for i in [j for j in range(8) if bool(r[j]) == success]:
        sel = select_peers(r, i, "contrastive", 0.5, random.Random(i))
        assert (len(sel.successes), len(sel.failures)) == TABLE[key]


def test_worked_example() -> None:
    r = [0, 1, 1, 0, 1, 0, 0, 1]
    expected = [[1, 2], [2, 4], [1, 4], [1, 2], [1, 2], [1, 2], [1, 2], [1, 2]]
    pools = {0: {3, 5, 6}, 1: {0, 3, 5, 6}, 2: {0, 3, 5, 6}, 3: {0, 5, 6}, 4: {0, 3, 5, 6}, 5: {0, 3, 6},
             6: {0, 3, 5}, 7: {0, 3, 5, 6}}
    for i in range(8):
        seen: set[int] = set()
        for seed in range(200):
            sel = select_peers(r, i, "contrastive", 0.5, random.Random(seed))
            assert sel.successes == expected[i]
            seen.update(sel.failures)
        assert seen == pools[i]  # membership, and every member is reachable


def test_failure_draw_roughly_uniform() -> None:
    r = [0, 1, 1, 0, 1, 0, 0, 1]
    rng = random.Random(123)
    counts = Counter(select_peers(r, 1, "contrastive", 0.5, rng).failures[0] for _ in range(8000))
    assert set(counts) == {0, 3, 5, 6}
    for c in counts.values():
        assert abs(c / 8000 - 0.25) < 0.03


def test_threshold_partial_credit() -> None:
    r = [0.5, 1.0, 0.9, 0.0]
    assert select_peers(r, 3, "positive", 1.0).successes == [1]
    assert select_peers(r, 3, "positive", 0.5).successes == [0, 1]
    # for binary rewards any threshold in (0, 1] gives the same split
    b = [1, 0, 1, 1, 0]
    for tau in (0.01, 0.5, 1.0):
        assert select_peers(b, 1, "positive", tau).successes == [0, 2]


def test_first_failure_and_sdpo_variants() -> None:
    r = [0, 1, 1, 0, 1, 0]
    assert select_peers(r, 1, "contrastive", failure="first").failures == [0]
    assert select_peers(r, 0, "contrastive", failure="first").failures == [3]
    assert select_peers(r, 0, "sdpo").successes == [1]
    assert select_peers(r, 0, "sdpo").failures == []
    # failure only when there is no primary success (SDPO-style condition)
    assert select_peers(r, 0, "contrastive", failure_when="no_success", rng=random.Random(0)).failures == []
    assert select_peers([0, 0, 0], 0, "contrastive", failure_when="no_success", rng=random.Random(0)).failures


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        select_peers([1, 0], 0, "both")  # type: ignore[arg-type]
    with pytest.raises(IndexError):
        select_peers([1, 0], 2, "positive")


def test_seq_mask_zero_exactly_when_no_section() -> None:
    texts = [f"resp{j}" for j in range(4)]
    cases = [
        ([1], "contrastive", None, 0),  # a group of one: nobody to learn from
        ([0, 0, 0, 0], "positive", None, 0),  # positive-only, all fail, no feedback
        ([0, 0, 0, 0], "positive", "wrong answer", 1),  # own feedback is a section
        ([0, 0, 0, 0], "contrastive", None, 1),
        ([1, 1, 1, 1], "contrastive", None, 1),
    ]
    for rewards, mode, fb, mask in cases:
        n = len(rewards)
        for i in range(n):
            sel = select_peers(rewards, i, mode, 0.5, random.Random(0))
            ctx = build_context("P", texts[:n], sel, feedback=fb)
            assert ctx.seq_mask == mask
            assert seq_mask([ctx]) == [int(bool(ctx.sections))]


def test_feedback_only_without_success_peer() -> None:
    texts = ["a", "b", "c"]
    sel = select_peers([0, 1, 0], 0, "contrastive", rng=random.Random(0))
    assert not build_context("P", texts, sel, feedback="fb").has("feedback")
    sel = select_peers([0, 0, 0], 0, "contrastive", rng=random.Random(0))
    assert build_context("P", texts, sel, feedback="fb").has("feedback")
    assert not build_context("P", texts, sel, feedback="fb", use_feedback=False).has("feedback")
    assert not build_context("P", texts, sel, feedback="").has("feedback")


def test_interleaved_groups_never_exchange_peers() -> None:
    # Two prompts' rollouts interleaved in one batch: A0 B0 A1 B1 A2 B2 A3 B3
    ra, rb = [1, 0, 1, 0], [0, 1, 0, 0]
    uids = ["A", "B"] * 4
    texts = [f"{u}{j // 2}" for j, u in enumerate(uids)]
    rewards = [ra[j // 2] if u == "A" else rb[j // 2] for j, u in enumerate(uids)]
    problems = [f"problem {u}" for u in uids]
    ctxs = batch_contexts(problems, texts, rewards, uids, seed=7)
    assert len(ctxs) == 8
    for b, ctx in enumerate(ctxs):
        assert ctx.problem == f"problem {uids[b]}"
        assert ctx.sections, "2S1F with n = 4 always has a peer"
        for s in ctx.sections:
            assert s.body[0] == uids[b]
        for j in ctx.selection.successes + ctx.selection.failures:
            assert uids[j] == uids[b] and j != b
    # A1 (batch row 2, failed) sees A0 then A2 as successes: rows 0 and 4
    assert ctxs[2].selection.successes == [0, 4]
    assert ctxs[2].selection.failures == [6]  # the only other A failure, A3


def test_peer_rng_is_deterministic_and_keyed() -> None:
    a = [peer_rng(1, 2, "u", 3).random() for _ in range(2)]
    assert a[0] == a[1]
    assert peer_rng(1, 2, "u", 3).random() != peer_rng(1, 2, "u", 4).random()
    assert peer_rng(1, 2, "u", 3).random() != peer_rng(1, 3, "u", 3).random()
    assert peer_rng(1, 2, "u", 3).random() != peer_rng(2, 2, "u", 3).random()
