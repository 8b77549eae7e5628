"""Metrics against hand-derived values and independent exact formulas."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from toolgym.suites.metrics import (
    accuracy,
    avg_at_k,
    bootstrap_ci,
    maj_at_k,
    majority_vote,
    mcnemar_exact,
    mean_pass_at_k,
    paired_test,
    pass_at_k,
)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 1, 0.4),  # c/n
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (4, 0, 1, 0.0),
        (4, 4, 2, 1.0),
        (10, 1, 10, 1.0),  # n - c < k: every k-subset contains the correct sample
        (10, 3, 3, 1 - 35 / 120),  # 1 - C(7,3)/C(10,3)
    ],
)
def test_pass_at_k_hand_values(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_exact_binomials_for_large_n() -> None:
    for n, c, k in [(200, 37, 50), (1000, 3, 100), (500, 250, 1), (64, 10, 32)]:
        exact = 1 - Fraction(math.comb(n - c, k), math.comb(n, k))
        assert pass_at_k(n, c, k) == pytest.approx(float(exact), rel=1e-10, abs=1e-12)


def test_pass_at_k_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


def test_mean_pass_at_k_and_avg_at_k() -> None:
    samples = [[True, False, False, False], [True, True, True, True], [False] * 4]
    # per task pass@2: 1 - C(3,2)/C(4,2) = 0.5 ; 1 ; 0
    assert mean_pass_at_k(samples, 2) == pytest.approx((0.5 + 1 + 0) / 3)
    assert avg_at_k([1, 0, 1, 1], 4) == 0.75
    assert avg_at_k([1, 0, 1, 1], 2) == 0.5
    with pytest.raises(ValueError):
        avg_at_k([1], 2)


def test_majority_vote_and_maj_at_k() -> None:
    assert majority_vote(["3", "4", "4", None, None, None]) == "4"
    assert majority_vote(["5", "6"]) == "5"  # tie: first seen
    assert majority_vote([None, None]) is None
    answers = ["3", "4", "4", "3", "3"]
    correct = [True, False, False, True, True]
    assert maj_at_k(answers, correct, 3) == 0.0  # 4 wins among the first three
    assert maj_at_k(answers, correct, 5) == 1.0  # 3 wins among all five
    assert maj_at_k([None, None], [False, False], 2) == 0.0


def test_bootstrap_ci_properties() -> None:
    assert bootstrap_ci([1.0] * 20).low == 1.0
    est = accuracy([1] * 200 + [0] * 200, seed=3)
    assert est.mean == 0.5 and est.n == 400
    # normal approximation: half-width 1.96 * sqrt(.25/400) = 0.049
    assert 0.04 < est.mean - est.low < 0.06 and 0.04 < est.high - est.mean < 0.06
    assert accuracy([1, 0, 1], seed=7) == accuracy([1, 0, 1], seed=7)  # seeded
    single = bootstrap_ci([0.25])
    assert (single.low, single.mean, single.high) == (0.25, 0.25, 0.25)


def test_mcnemar_exact_hand_values() -> None:
    assert mcnemar_exact(0, 5) == pytest.approx(2 / 32)
    assert mcnemar_exact(1, 1) == 1.0
    assert mcnemar_exact(2, 8) == pytest.approx(2 * 56 / 1024)
    assert mcnemar_exact(0, 0) == 1.0


def test_paired_test_detects_a_real_difference_and_not_a_null_one() -> None:
    a = [0] * 50 + [1] * 50
    b = [1] * 40 + [0] * 10 + [1] * 50  # b fixes 40 of a's failures, breaks none
    t = paired_test(a, b, seed=0)
    assert t.delta == pytest.approx(0.4)
    assert t.discordant == (0, 40)
    assert t.p_mcnemar is not None and t.p_mcnemar < 1e-9
    assert t.p_bootstrap < 0.01
    assert t.low > 0
    same = paired_test(a, a)
    assert same.delta == 0 and same.p_bootstrap == 1.0 and same.p_mcnemar == 1.0
    cont = paired_test([0.2, 0.4], [0.3, 0.5])
    assert cont.p_mcnemar is None and cont.delta == pytest.approx(0.1)
