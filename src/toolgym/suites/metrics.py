"""Evaluation metrics: unbiased pass@k, avg@k, maj@k, accuracy with bootstrap intervals, and
paired significance tests for comparing two runs on the same tasks.

Pure Python + numpy; no torch. Every random procedure takes an explicit seed so that reports
are reproducible bit for bit.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimate from n samples of which c are correct (Chen et al., 2021).

    1 - C(n-c, k) / C(n, k), computed as the product 1 - prod_{i=n-c+1}^{n} (1 - k/i), which
    never forms the huge binomials and stays exact to float precision for large n.
    """
    if n < 1 or k < 1:
        raise ValueError(f"pass_at_k needs n >= 1 and k >= 1, got n={n}, k={k}")
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n, got c={c}, n={n}")
    if k > n:
        raise ValueError(f"pass_at_k needs k <= n (k={k}, n={n}): draw at least k samples per task")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def mean_pass_at_k(samples: Sequence[Sequence[bool | float]], k: int) -> float:
    """Mean over tasks of pass@k; each task's list holds per-sample correctness (truthy = pass)."""
    if not samples:
        raise ValueError("mean_pass_at_k needs at least one task")
    return float(np.mean([pass_at_k(len(s), sum(1 for x in s if x), k) for s in samples]))


def avg_at_k(scores: Sequence[bool | float], k: int | None = None) -> float:
    """Mean score of the first k samples of one task (avg@k); all samples when k is None."""
    use = list(scores if k is None else scores[:k])
    if not use or (k is not None and len(use) < k):
        raise ValueError(f"avg_at_k needs {k} samples, got {len(scores)}")
    return float(np.mean([float(x) for x in use]))


def majority_vote(answers: Sequence[Hashable | None]) -> Hashable | None:
    """Most frequent non-None answer; ties go to the answer seen first (deterministic)."""
    present = [a for a in answers if a is not None]
    if not present:
        return None
    counts = Counter(present)
    best = max(counts.values())
    for a in present:
        if counts[a] == best:
            return a
    return None  # pragma: no cover - unreachable


def maj_at_k(answers: Sequence[Hashable | None], correct: Sequence[bool], k: int) -> float:
    """maj@k of one task: 1.0 when the majority answer among the first k samples is correct.

    `answers` are normalized answer keys (None = no answer extracted); `correct[i]` says whether
    sample i is right. Equal keys must have equal correctness.
    """
    if len(answers) != len(correct):
        raise ValueError("maj_at_k: answers and correct must have the same length")
    if len(answers) < k:
        raise ValueError(f"maj_at_k needs {k} samples, got {len(answers)}")
    voted = majority_vote(answers[:k])
    if voted is None:
        return 0.0
    for a, ok in zip(answers[:k], correct[:k], strict=True):
        if a == voted:
            return 1.0 if ok else 0.0
    return 0.0  # pragma: no cover


@dataclass
class Estimate:
    """A mean with a percentile-bootstrap confidence interval."""

    mean: float
    low: float
    high: float
    n: int
    confidence: float = 0.95

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def bootstrap_ci(
    values: Sequence[float], *, resamples: int = 1000, confidence: float = 0.95, seed: int = 0
) -> Estimate:
    """Mean of per-task values with a percentile bootstrap interval (tasks resampled with replacement)."""
    x = np.asarray([float(v) for v in values], dtype=np.float64)
    if x.size == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    mean = float(x.mean())
    if x.size == 1:
        return Estimate(mean, mean, mean, 1, confidence)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(resamples, x.size))
    means = x[idx].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return Estimate(mean, float(low), float(high), int(x.size), confidence)


def accuracy(
    correct: Sequence[bool | float], *, resamples: int = 1000, confidence: float = 0.95, seed: int = 0
) -> Estimate:
    """Accuracy (mean of 0/1 per-task scores) with a bootstrap confidence interval."""
    return bootstrap_ci([float(c) for c in correct], resamples=resamples, confidence=confidence, seed=seed)


@dataclass
class PairedTest:
    """Difference b - a on shared tasks, its bootstrap interval and two-sided p-values."""

    n: int
    mean_a: float
    mean_b: float
    delta: float
    low: float
    high: float
    p_bootstrap: float
    p_mcnemar: float | None  # only when every score is 0/1
    discordant: tuple[int, int] | None  # (a right & b wrong, a wrong & b right)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts b and c (binomial, p = 1/2)."""
    n = b + c
    if n == 0:
        return 1.0
    m = min(b, c)
    tail = sum(math.comb(n, i) for i in range(m + 1)) / 2.0**n
    return float(min(1.0, 2.0 * tail))


def paired_test(
    a: Sequence[float], b: Sequence[float], *, resamples: int = 2000, confidence: float = 0.95, seed: int = 0
) -> PairedTest:
    """Paired comparison of per-task scores a[i] vs b[i] (same tasks, same order).

    The bootstrap resamples tasks jointly; its p-value is the two-sided share of resampled deltas
    on the far side of zero. McNemar's exact test is added when both score lists are 0/1.
    """
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.size == 0:
        raise ValueError("paired_test needs two non-empty score lists of equal length")
    d = y - x
    delta = float(d.mean())
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, d.size, size=(resamples, d.size))
    boot = d[idx].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = (float(v) for v in np.quantile(boot, [alpha, 1.0 - alpha]))
    if np.all(d == 0):
        p_boot = 1.0
    else:
        # Centre the bootstrap distribution on zero (null hypothesis) and count as-extreme deltas.
        centred = boot - delta
        p_boot = float((np.sum(np.abs(centred) >= abs(delta)) + 1) / (resamples + 1))
    binary = bool(np.all(np.isin(x, (0.0, 1.0))) and np.all(np.isin(y, (0.0, 1.0))))
    p_mc = None
    disc = None
    if binary:
        n10 = int(np.sum((x == 1) & (y == 0)))
        n01 = int(np.sum((x == 0) & (y == 1)))
        disc = (n10, n01)
        p_mc = mcnemar_exact(n10, n01)
    return PairedTest(int(d.size), float(x.mean()), float(y.mean()), delta, low, high, min(1.0, p_boot), p_mc, disc)
