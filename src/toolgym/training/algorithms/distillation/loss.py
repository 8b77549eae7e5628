"""The MOPD loss (docs/algorithms/mopd.md, "Weights, masks and aggregation"): a pure function over
padded [B, T] tensors.

``loss = mean_i ( sum_t m_it * rho_t * w_t * W_i * D_it / max(sum_t m_it, 1) )`` with
``m = loss_mask * seq_mask``; sequences with an empty teacher context contribute 0 but still
count in the number of sequences. ``W_i``: the optional sequence-level mismatch weight (stale rollouts,
docs/algorithms/mopd.md). There is no RL term: the reward only labelled the peers.
"""

from __future__ import annotations

from typing import Literal

import torch

from toolgym.training.algorithms.distillation.divergences import sampled_token_reverse_kl, topk_divergence
from toolgym.training.policy_gradient.loss_metrics import to_floats

Agg = Literal["seq-mean-token-mean", "token-mean"]


def is_ratio(logp: torch.Tensor, old_logp: torch.Tensor, cap: float = 2.0) -> torch.Tensor:
    """Detached, capped importance ratio ``min(exp(clamp(logp - old, -20, 20)), cap)``; 1 on-policy."""
    return torch.exp((logp.detach() - old_logp.detach()).clamp(-20.0, 20.0)).clamp(max=cap)


def token_mismatch_weight(trainer_old_logp: torch.Tensor, rollout_logp: torch.Tensor, cap: float = 2.0) -> torch.Tensor:
    """Detached, capped trainer-vs-inference-engine weight ``min(exp(old - rollout), cap)``."""
    return torch.exp((trainer_old_logp.detach() - rollout_logp.detach()).clamp(max=20.0)).clamp(max=cap)


def distill_divergence(
    kind: Literal["jsd", "topk", "sampled_rkl"],
    *,
    lp_topk: torch.Tensor | None = None,
    lq_topk: torch.Tensor | None = None,
    logp: torch.Tensor | None = None,
    teacher_logp: torch.Tensor | None = None,
    alpha: float = 0.5,
    tail: bool = True,
) -> torch.Tensor:
    """Per-token distillation term [B, T].

    ``jsd`` and ``topk`` are one computation: the generalised JSD(alpha) over the student's top-K
    buckets (+ tail), forward KL only with alpha = 0. ``sampled_rkl``: the standard OPD surrogate on
    the sampled token.
    """
    if kind in ("jsd", "topk"):
        if lp_topk is None or lq_topk is None:
            raise ValueError(f"divergence {kind!r} needs lp_topk and lq_topk")
        return topk_divergence(lp_topk, lq_topk, alpha=alpha, tail=tail)
    if kind == "sampled_rkl":
        if logp is None or teacher_logp is None:
            raise ValueError("divergence 'sampled_rkl' needs logp and teacher_logp")
        return sampled_token_reverse_kl(logp, teacher_logp)
    raise ValueError(f"unknown divergence {kind!r}: use 'jsd', 'topk' or 'sampled_rkl'")


def mopd_loss(
    divergence: torch.Tensor,
    loss_mask: torch.Tensor,
    seq_mask: torch.Tensor,
    *,
    logp: torch.Tensor | None = None,
    old_logp: torch.Tensor | None = None,
    ratio_cap: float = 2.0,
    trainer_old_logp: torch.Tensor | None = None,
    rollout_logp: torch.Tensor | None = None,
    weight_cap: float = 2.0,
    agg: Agg = "seq-mean-token-mean",
    metrics_on_device: bool = False,
    seq_weight: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]] | tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Aggregate per-token divergences [B, T] into the scalar MOPD loss.

    ``logp``/``old_logp`` give the IS ratio (omit both for the on-policy case, rho = 1);
    ``trainer_old_logp``/``rollout_logp`` give the optional token-level rollout weight; ``seq_weight`` [B]
    the optional sequence-level mismatch weight (``loss.mismatch_weight``, detached), which multiplies every
    token term of its sequence and no normaliser (the two rollout weights are never on together).
    ``agg``: per-sequence token-mean then mean over all sequences (default, the reference
    behaviour), or one global token-mean. ``metrics_on_device``: metrics as 0-dim device tensors (no host read).
    """
    if divergence.dim() != 2:
        raise ValueError(f"divergence must be [B, T], got shape {tuple(divergence.shape)}")
    m = loss_mask.to(divergence.dtype) * seq_mask.to(divergence.dtype).unsqueeze(-1)
    w = torch.ones_like(divergence)
    metrics: dict[str, torch.Tensor] = {}
    if (logp is None) != (old_logp is None):
        raise ValueError("pass both logp and old_logp for the IS ratio, or neither")
    if logp is not None and old_logp is not None:
        rho = is_ratio(logp, old_logp, ratio_cap)
        w = w * rho
        metrics["mopd/ratio_mean"] = _masked_mean(rho, m)
        metrics["mopd/ratio_capped_frac"] = _masked_mean((rho >= ratio_cap).to(m.dtype), m)
    if (trainer_old_logp is None) != (rollout_logp is None):
        raise ValueError("pass both trainer_old_logp and rollout_logp for the rollout weight, or neither")
    if trainer_old_logp is not None and rollout_logp is not None:
        rw = token_mismatch_weight(trainer_old_logp, rollout_logp, weight_cap)
        w = w * rw
        metrics["mopd/token_mismatch_weight_mean"] = _masked_mean(rw, m)
    if seq_weight is not None:
        if tuple(seq_weight.shape) != (divergence.shape[0],):
            raise ValueError(f"seq_weight must have shape [B]={divergence.shape[0]}; got {tuple(seq_weight.shape)}")
        w = w * seq_weight.detach().to(w.dtype).unsqueeze(-1)
    # Masked positions may hold garbage (padding); keep them out of the graph's values.
    per_tok = torch.where(m > 0, w * divergence, torch.zeros_like(divergence))
    if agg == "seq-mean-token-mean":
        per_seq = (per_tok * m).sum(-1) / m.sum(-1).clamp(min=1.0)
        loss = per_seq.mean() if per_seq.numel() else per_tok.sum()
    elif agg == "token-mean":
        loss = (per_tok * m).sum() / m.sum().clamp(min=1.0)
    else:
        raise ValueError(f"unknown agg {agg!r}: use 'seq-mean-token-mean' or 'token-mean'")
    metrics["mopd/divergence_mean"] = _masked_mean(divergence.detach(), m)
    metrics["mopd/trained_frac"] = seq_mask.float().mean() if seq_mask.numel() else m.new_zeros(())
    metrics["mopd/tokens"] = m.sum()
    metrics["mopd/loss"] = loss.detach()
    return loss, metrics if metrics_on_device else to_floats(metrics)


def _masked_mean(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return (x.detach() * m).sum() / m.sum().clamp(min=1.0)
