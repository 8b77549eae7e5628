"""Diagnostics of the importance ratio along the sequence (spec §3.11, §8.4) and token entropy.

The cheap per-step numbers (clip fractions, quantiles, KL, scale) come with ``policy_loss``.
This module holds the heavier every-N-steps view: per-position mean and std of ``log ρ_t``,
the fitted ``σ̂`` of the ``std ≈ σ̂·√t`` law, and sign-aware clip rates per position (the
Figure 1 view). An accumulator sums over the micro-batches of a rollout batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from toolgym.training.losses import DELTA_CLAMP, TokenTerms


def fit_sqrt_sigma(std: Tensor, counts: Tensor, min_count: int = 30) -> float:
    """No-intercept weighted least squares of ``std_t`` on ``√t`` (t = 1..len), weights ``√count_t``.

    Minimises ``Σ_t w_t (std_t - σ√t)²`` over positions with at least ``min_count`` tokens:
    ``σ̂ = Σ w √t std / Σ w t``. NaN when no position qualifies.
    """
    std = std.detach().double().reshape(-1)
    counts = counts.detach().double().reshape(-1)
    t = torch.arange(1, std.numel() + 1, dtype=torch.float64)
    keep = (counts >= min_count) & torch.isfinite(std)
    if not bool(keep.any()):
        return math.nan
    w = counts[keep].sqrt()
    return float((w * t[keep].sqrt() * std[keep]).sum() / (w * t[keep]).sum())


@dataclass
class PositionStats:
    """Per-position view of ``log ρ_t`` (index 0 is t = 1)."""

    counts: Tensor  # policy tokens at each position
    mean: Tensor  # mean of log ρ_t (drift: about -t·KL under π_b)
    std: Tensor  # std of log ρ_t (NaN where count < 2)
    clip_rate: Tensor  # sign-aware clip events (high + low + dual) / count; NaN where count = 0
    sigma_hat: float  # fitted σ̂ of std ≈ σ̂·√t

    def as_dict(self) -> dict[str, object]:
        return {
            "sigma_hat": self.sigma_hat,
            "counts": self.counts.tolist(),
            "mean": self.mean.tolist(),
            "std": self.std.tolist(),
            "clip_rate": self.clip_rate.tolist(),
        }


class PositionAccumulator:
    """Sums per-position moments of ``log ρ_t`` (cumulative, uncapped) and clip events over batches."""

    def __init__(self, min_count: int = 30) -> None:
        self.min_count = min_count
        self._n = torch.zeros(0, dtype=torch.float64)
        self._s1 = torch.zeros(0, dtype=torch.float64)
        self._s2 = torch.zeros(0, dtype=torch.float64)
        self._clips = torch.zeros(0, dtype=torch.float64)

    def _grow(self, size: int) -> None:
        if size > self._n.numel():
            pad = size - self._n.numel()
            z = torch.zeros(pad, dtype=torch.float64)
            self._n, self._s1, self._s2, self._clips = (torch.cat([v, z]) for v in (self._n, self._s1, self._s2, self._clips))

    def add(self, logp: Tensor, old_logp: Tensor, mask: Tensor, clipped: Tensor | None = None) -> None:
        """Add one batch; ``clipped`` (bool ``[B, T]``) marks clip events, e.g. from ``per_token_loss``."""
        m = mask != 0
        d = torch.where(m, (logp.detach().double() - old_logp.detach().double()).clamp(-DELTA_CLAMP, DELTA_CLAMP), 0.0)
        log_rho = d.cumsum(dim=-1)
        t = m.to(torch.int64).cumsum(dim=-1)
        idx = (t - 1)[m]
        vals = log_rho[m]
        size = int(t.max()) if t.numel() else 0
        self._grow(size)
        ones = torch.ones_like(vals)
        self._n.index_add_(0, idx, ones)
        self._s1.index_add_(0, idx, vals)
        self._s2.index_add_(0, idx, vals * vals)
        if clipped is not None:
            self._clips.index_add_(0, idx, clipped[m].to(torch.float64))

    def add_terms(self, terms: TokenTerms) -> None:
        """Add from ``per_token_loss`` output: its log-ratios (for the cumulative ratio) and clip flags."""
        m = terms.mask
        clipped = terms.clip_high | terms.clip_low | terms.clip_dual
        t = terms.positions
        idx = (t - 1)[m]
        self._grow(int(t.max()) if t.numel() else 0)
        vals = terms.log_ratio.double()[m]
        self._n.index_add_(0, idx, torch.ones_like(vals))
        self._s1.index_add_(0, idx, vals)
        self._s2.index_add_(0, idx, vals * vals)
        self._clips.index_add_(0, idx, clipped[m].to(torch.float64))

    def result(self) -> PositionStats:
        n = self._n
        mean = self._s1 / n.clamp_min(1)
        var = (self._s2 - n * mean * mean) / (n - 1).clamp_min(1)
        std = torch.where(n >= 2, var.clamp_min(0).sqrt(), math.nan)
        mean = torch.where(n >= 1, mean, math.nan)
        clip_rate = torch.where(n >= 1, self._clips / n.clamp_min(1), math.nan)
        return PositionStats(counts=n.clone(), mean=mean, std=std, clip_rate=clip_rate,
                             sigma_hat=fit_sqrt_sigma(std, n, self.min_count))


def position_stats(logp: Tensor, old_logp: Tensor, mask: Tensor, min_count: int = 30) -> PositionStats:
    """One-batch shortcut for :class:`PositionAccumulator`."""
    acc = PositionAccumulator(min_count)
    acc.add(logp, old_logp, mask)
    return acc.result()


def entropy_from_logits(logits: Tensor, chunk_size: int = 1024) -> Tensor:
    """Per-position entropy of ``softmax(logits)`` over the last axis, in float32 (at least), chunked."""
    flat = logits.detach().reshape(-1, logits.shape[-1])
    dt = torch.promote_types(logits.dtype, torch.float32)
    out = torch.empty(flat.shape[0], dtype=dt, device=logits.device)
    for s in range(0, flat.shape[0], chunk_size):
        z = flat[s : s + chunk_size].to(dt)
        logp = z - torch.logsumexp(z, dim=-1, keepdim=True)
        p = logp.exp()
        out[s : s + chunk_size] = -torch.where(p > 0, p * logp, 0.0).sum(dim=-1)
    return out.reshape(logits.shape[:-1])
