"""Token-level divergences between a student P and a teacher Q (docs/algorithms/mopd.md, "The divergence").

All functions work on log-probabilities over a trailing bucket axis and return one value per
leading position. The teacher side is always detached: distillation sends gradient only
through the student. Conventions: ``alpha = 1`` is reverse KL(P||Q), ``alpha = 0``
is forward KL(Q||P), and ``0 < alpha < 1`` is the generalised JSD with mixture
``M = (1 - alpha) P + alpha Q`` (``alpha = 0.5`` is the symmetric JSD in nats).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

TAIL_CLAMP = -1e-7  # log-mass ceiling of the top-K before taking log(1 - mass)


def add_tail(lp_topk: torch.Tensor) -> torch.Tensor:
    """Append the tail bucket ``log(1 - sum_k p_k)`` to top-K log-probs ([..., K] -> [..., K+1]).

    The clamp keeps the tail finite (about log 1e-7) when the top-K already holds all the mass,
    so K = V reproduces the full-vocabulary divergence.
    """
    mass = torch.logsumexp(lp_topk, dim=-1, keepdim=True).clamp(max=TAIL_CLAMP)
    tail = torch.log(-torch.expm1(mass))
    return torch.cat([lp_topk, tail], dim=-1)


def renormalize(lp_topk: torch.Tensor) -> torch.Tensor:
    """The no-tail option: renormalise top-K log-probs so they sum to one over K buckets."""
    return lp_topk - torch.logsumexp(lp_topk, dim=-1, keepdim=True)


def _kl(lp_a: torch.Tensor, lp_b: torch.Tensor) -> torch.Tensor:
    """KL(A||B) over the last axis from log-probs."""
    return (lp_a.exp() * (lp_a - lp_b)).sum(-1)


def divergence(lp: torch.Tensor, lq: torch.Tensor, alpha: float = 0.5) -> torch.Tensor:
    """Generalised JSD(alpha) between student log-probs ``lp`` and teacher log-probs ``lq``.

    The endpoints are special-cased (the mixture form vanishes there): alpha=0 -> KL(Q||P),
    alpha=1 -> KL(P||Q). The teacher is detached.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    lq = lq.detach()
    if alpha == 0.0:
        return _kl(lq, lp)
    if alpha == 1.0:
        return _kl(lp, lq)
    lm = torch.logaddexp(lp + math.log(1.0 - alpha), lq + math.log(alpha))
    return (1.0 - alpha) * _kl(lp, lm) + alpha * _kl(lq, lm)


def jsd(lp: torch.Tensor, lq: torch.Tensor) -> torch.Tensor:
    """Symmetric Jensen-Shannon divergence in nats (alpha = 0.5)."""
    return divergence(lp, lq, 0.5)


def reverse_kl(lp: torch.Tensor, lq: torch.Tensor) -> torch.Tensor:
    """KL(P||Q), the student's own distribution first (alpha = 1)."""
    return divergence(lp, lq, 1.0)


def forward_kl(lp: torch.Tensor, lq: torch.Tensor) -> torch.Tensor:
    """KL(Q||P), mass-covering (alpha = 0)."""
    return divergence(lp, lq, 0.0)


def _log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """Log-softmax in at least fp32 (bf16/fp16 logits lose the tail otherwise)."""
    if logits.dtype not in (torch.float32, torch.float64):
        logits = logits.float()
    return F.log_softmax(logits, dim=-1)


def student_topk(student_logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Student log-softmax gathered at its own top-k ids.

    Returns ``(lp_topk [..., k] with gradient, ids [..., k] without gradient)``. The ids come
    from the student's logits only; the teacher is gathered at these same ids.
    """
    lp_full = _log_softmax(student_logits)
    k = min(k, student_logits.shape[-1])
    ids = student_logits.detach().topk(k, dim=-1).indices
    return lp_full.gather(-1, ids), ids


def gather_logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Full-vocabulary log-softmax of ``logits`` gathered at ``ids`` (same leading shape)."""
    return _log_softmax(logits).gather(-1, ids)


def topk_divergence(
    lp_topk: torch.Tensor, lq_topk: torch.Tensor, alpha: float = 0.5, tail: bool = True
) -> torch.Tensor:
    """Divergence over K gathered buckets plus the tail (or renormalised top-K without it)."""
    if tail:
        return divergence(add_tail(lp_topk), add_tail(lq_topk.detach()), alpha)
    return divergence(renormalize(lp_topk), renormalize(lq_topk.detach()), alpha)


def full_divergence(student_logits: torch.Tensor, teacher_logits: torch.Tensor, alpha: float = 0.5) -> torch.Tensor:
    """Divergence over the whole vocabulary (the reference the top-K form approximates)."""
    return divergence(_log_softmax(student_logits), _log_softmax(teacher_logits.detach()), alpha)


def sampled_token_reverse_kl(logp: torch.Tensor, teacher_logp: torch.Tensor) -> torch.Tensor:
    """Standard OPD surrogate on sampled tokens: ``sg(log p - log q) * log p`` per token.

    Its gradient in expectation over y ~ P is the gradient of KL(P||Q) (valid for alpha = 1
    only); its value is not the KL. ``(logp - teacher_logp).detach()`` is the per-token KL
    estimate (the negative of OPD's "advantage").
    """
    return (logp - teacher_logp).detach() * logp
