"""Outcome advantages from group-relative rewards (GRPO, Dr.GRPO, RLOO).

One scalar advantage per response; the trainer broadcasts it to the response's tokens and
the loss mask removes tool tokens (docs/algorithms/ctpo.md, "Advantages"). Groups are the G responses
sampled for one
prompt. Groups whose valid rewards are all equal get advantage 0 and are counted; non-finite
rewards are skipped (advantage 0, excluded from their group's statistics) and counted, and
``AdvantageStats.valid`` tells the trainer which responses to drop.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

ESTIMATORS: tuple[str, ...] = ("grpo", "drgrpo", "rloo")


@dataclass
class AdvantageStats:
    """What the estimator saw: counts for logging, and which responses were usable."""

    n_samples: int
    n_groups: int
    n_zero_groups: int  # groups whose valid rewards are all equal (incl. a single valid member): advantage 0
    n_nonfinite: int  # responses with a NaN/inf reward: skipped, advantage 0
    valid: Tensor  # bool, shaped like the rewards: False where the reward was non-finite

    def as_dict(self) -> dict[str, float]:
        return {
            "adv_samples": float(self.n_samples),
            "adv_groups": float(self.n_groups),
            "adv_zero_groups": float(self.n_zero_groups),
            "adv_nonfinite": float(self.n_nonfinite),
        }


def _group_index(group_ids: Sequence[Hashable] | Tensor, n: int) -> tuple[Tensor, int]:
    if isinstance(group_ids, Tensor):
        group_ids = group_ids.reshape(-1).tolist()
    ids = list(group_ids)
    if len(ids) != n:
        raise ValueError(f"group_ids must have one entry per reward ({n}); got {len(ids)}")
    index: dict[Hashable, int] = {}
    out = [index.setdefault(g, len(index)) for g in ids]
    return torch.tensor(out, dtype=torch.int64), len(index)


def group_advantages(
    rewards: Sequence[float] | Tensor,
    group_ids: Sequence[Hashable] | Tensor | None = None,
    estimator: str = "grpo",
    eps: float = 1e-6,
) -> tuple[Tensor, AdvantageStats]:
    """Group-relative advantages.

    ``rewards`` is either 1-D with ``group_ids`` (one id per reward, any hashable) or a
    ``[num_groups, G]`` tensor (each row a group, ``group_ids=None``). The result has the shape
    of ``rewards``. Estimators: ``"grpo"`` ``(R - mean)/(std_{n-1} + eps)``; ``"drgrpo"``
    ``R - mean`` (no std); ``"rloo"`` ``R - mean of the other members``.
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {', '.join(map(repr, ESTIMATORS))}; got {estimator!r}")
    r = torch.as_tensor(rewards).detach()
    out_dtype = torch.float64 if r.dtype == torch.float64 else torch.float32
    r = r.to(torch.float64)
    shape = r.shape
    if group_ids is None:
        if r.dim() != 2:
            raise ValueError(f"rewards must be [num_groups, G] when group_ids is None; got shape {tuple(shape)}")
        idx = torch.arange(shape[0]).repeat_interleave(shape[1])
        n_groups = int(shape[0])
    else:
        if r.dim() != 1:
            raise ValueError(f"rewards must be 1-D when group_ids are given; got shape {tuple(shape)}")
        idx, n_groups = _group_index(group_ids, r.numel())
    flat = r.reshape(-1)
    valid = torch.isfinite(flat)
    vals = torch.where(valid, flat, 0.0)
    vf = valid.to(torch.float64)

    count = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, idx, vf)
    total = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, idx, vals)
    mean = total / count.clamp_min(1.0)
    dev = torch.where(valid, flat - mean[idx], 0.0)
    big = torch.finfo(torch.float64).max
    gmax = torch.full((n_groups,), -big, dtype=torch.float64).scatter_reduce_(
        0, idx, torch.where(valid, flat, -big), reduce="amax")
    gmin = torch.full((n_groups,), big, dtype=torch.float64).scatter_reduce_(
        0, idx, torch.where(valid, flat, big), reduce="amin")
    degenerate = (count >= 1) & ((gmax == gmin) | (count < 2))

    if estimator == "grpo":
        ss = torch.zeros(n_groups, dtype=torch.float64).index_add_(0, idx, dev * dev)
        std = (ss / (count - 1).clamp_min(1.0)).sqrt()
        adv = dev / (std[idx] + eps)
    elif estimator == "drgrpo":
        adv = dev
    else:  # rloo: R_i - (sum - R_i)/(n - 1) = n/(n - 1) (R_i - mean)
        adv = dev * (count / (count - 1).clamp_min(1.0))[idx]
    adv = torch.where(valid & ~degenerate[idx], adv, 0.0)

    stats = AdvantageStats(
        n_samples=int(flat.numel()),
        n_groups=n_groups,
        n_zero_groups=int(degenerate.sum()),
        n_nonfinite=int((~valid).sum()),
        valid=valid.reshape(shape),
    )
    return adv.reshape(shape).to(out_dtype), stats


def grpo_advantages(rewards: Sequence[float] | Tensor, group_ids: Sequence[Hashable] | Tensor | None = None,
                    eps: float = 1e-6) -> tuple[Tensor, AdvantageStats]:
    """GRPO: ``(R - mean_g)/(std_g + eps)`` with the unbiased (n-1) std."""
    return group_advantages(rewards, group_ids, "grpo", eps)


def drgrpo_advantages(rewards: Sequence[float] | Tensor,
                      group_ids: Sequence[Hashable] | Tensor | None = None) -> tuple[Tensor, AdvantageStats]:
    """Dr.GRPO: ``R - mean_g``; no std normalisation, so easy/hard prompts are not re-weighted."""
    return group_advantages(rewards, group_ids, "drgrpo")


def rloo_advantages(rewards: Sequence[float] | Tensor,
                    group_ids: Sequence[Hashable] | Tensor | None = None) -> tuple[Tensor, AdvantageStats]:
    """RLOO: ``R_i`` minus the mean reward of the other members of its group."""
    return group_advantages(rewards, group_ids, "rloo")
