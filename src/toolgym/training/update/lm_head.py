"""Log-probs of chosen tokens through a causal LM's head, chunk by chunk, never holding [N, V] for backward.

Why: the plain path keeps each row's float32 log-softmax for backward, about N x V x 4 bytes (4.9 GB for one
8k-token response at a 151,936-token vocabulary). Here the head runs on chunks of the N hidden states; the
forward keeps per token only the log-sum-exp (and the entropy when asked), and backward recomputes each
chunk's logits from the saved hidden states (as TRL's chunked log-prob head and Liger's fused linear
cross-entropy do). Saved for backward: the [N, H] hidden states, the weight (a parameter: no copy), [N]
floats. Transient: a few [chunk, V] buffers (``CHUNK_ELEMENTS``).

Numerics follow the plain path: logits in the compute dtype (bf16 under autocast), then float32, the model's
logit transform, then ``/ temperature`` and the log-softmax in float32. Gradients of the head's weight add up
over chunks in float32.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

#: logits per chunk: 2**25 floats are 128 MiB in float32 (~220 tokens at Qwen's 151,936-token vocabulary)
CHUNK_ELEMENTS = 1 << 25


@dataclass(frozen=True)
class Head:
    """A linear LM head and the transform the model applies to its output:
    ``logits = softcap * tanh(scale * (h W^T + b) / softcap)`` (no tanh when ``softcap`` is None)."""

    weight: torch.Tensor  # [V, H]
    bias: torch.Tensor | None = None
    scale: float = 1.0  # Cohere's logit_scale, Granite's 1 / logits_scaling
    softcap: float | None = None  # Gemma 2/3's final_logit_softcapping


def token_logprobs(hidden: torch.Tensor, head: Head, targets: torch.Tensor, temperature: float = 1.0,
                   with_entropy: bool = False, chunk: int | None = None,
                   live: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``([N] log p(target), [N] entropy or None)`` under ``softmax(logits / temperature)``, float32.

    ``hidden``: [N, H] inputs of the head; ``targets``: [N] token ids. Differentiable in ``hidden`` and the
    head's weight and bias; ``chunk`` tokens per chunk (default: ``CHUNK_ELEMENTS // V``). ``live``: the
    indices (a host list, e.g. the loss mask's tokens) of the only tokens that may get an upstream gradient;
    backward recomputes the head there only, and a gradient sent to any other token is dropped. None: every
    token. Known on the host, so backward never reads the device to find them."""
    if hidden.dim() != 2 or targets.shape != hidden.shape[:1]:
        raise ValueError(f"hidden must be [N, H] and targets [N]; got {tuple(hidden.shape)}, {tuple(targets.shape)}")
    vocab = head.weight.shape[0]
    rows = chunk or max(1, CHUNK_ELEMENTS // vocab)
    dtype = compute_dtype(hidden, head.weight)
    frozen = torch.is_grad_enabled() and hidden.requires_grad and not head.weight.requires_grad and \
        not (head.bias is not None and head.bias.requires_grad)
    idx = None if live is None or len(live) == hidden.shape[0] else \
        torch.tensor(list(live), dtype=torch.long).to(hidden.device, non_blocking=True)
    logp, ent = _ChunkedLogprob.apply(hidden, head.weight, head.bias, targets, float(temperature), float(head.scale),
                                      head.softcap, dtype, bool(with_entropy), int(rows), frozen, idx)
    return logp, (ent if with_entropy else None)


def compute_dtype(hidden: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    """The dtype the head's matmul runs in: autocast's where it is on for the device, else the weight's."""
    kind = hidden.device.type
    try:
        if torch.is_autocast_enabled(kind):
            return torch.get_autocast_dtype(kind)
    except (RuntimeError, TypeError):  # a device type without autocast
        pass
    return weight.dtype


def head_logits(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, scale: float,
                softcap: float | None, dtype: torch.dtype,
                as_float: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(float32 logits [n, V], tanh of the capped logits or None)``: the head as the model computes it.
    ``as_float=False``: the logits stay in ``dtype`` (as a model's own logits under autocast)."""
    y = F.linear(hidden.to(dtype), weight.to(dtype), None if bias is None else bias.to(dtype))
    y = y.float() if as_float else y
    if scale != 1.0:
        y = y * scale
    if softcap is None:
        return y, None
    t = torch.tanh(y / softcap)
    return t * softcap, t


class _ChunkedLogprob(torch.autograd.Function):
    """Forward: per chunk, logits -> log-sum-exp, the target's logit, the entropy. Backward: per chunk, the
    logits again, then ``d log p_y / dz = 1[y] - p`` and ``d H / dz = -p (log p + H)``, through the
    temperature and the transform, into the hidden states, the weight and the bias.

    A frozen head (LoRA's, say) needs only the hidden states' gradient, which is linear in the upstream
    gradient: ``frozen`` forms its [N, H] factors in the forward instead (saved in place of the hidden
    states), so nothing is recomputed and the head costs two matmuls, as on the full path."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, scale, softcap, dtype, with_entropy, chunk,  # type: ignore[override]
                frozen, live):
        n = hidden.shape[0]
        lse = torch.empty(n, dtype=torch.float32, device=hidden.device)
        logp = torch.empty(n, dtype=torch.float32, device=hidden.device)
        ent = torch.empty(n if with_entropy else 0, dtype=torch.float32, device=hidden.device)
        u = torch.empty_like(hidden) if frozen else None  # d log p_y / d h
        v = torch.empty_like(hidden) if frozen and with_entropy else None  # d H / d h
        w = weight.to(dtype)  # cast once, not once per chunk (head_logits' .to(dtype) is then a no-op)
        b = None if bias is None else bias.to(dtype)
        for s in range(0, n, chunk):
            e = min(s + chunk, n)
            z, t = head_logits(hidden[s:e], w, b, scale, softcap, dtype)
            if temperature != 1.0:
                z.div_(temperature)
            m = torch.logsumexp(z, dim=-1)
            lse[s:e] = m
            logp[s:e] = z.gather(-1, targets[s:e].unsqueeze(-1)).squeeze(-1) - m
            if with_entropy:
                ent[s:e] = m - (torch.softmax(z, dim=-1) * z).sum(-1)
            if frozen:
                ones, zeros = torch.ones_like(m), torch.zeros_like(m)
                if with_entropy:
                    gy = _grad_y(z.clone(), None if t is None else t.clone(), m, ent[s:e], targets[s:e], zeros, ones,
                                 temperature, scale)
                    v[s:e] = (gy.to(dtype) @ w).to(hidden.dtype)
                gy = _grad_y(z, t, m, None, targets[s:e], ones, None, temperature, scale)
                u[s:e] = (gy.to(dtype) @ w).to(hidden.dtype)
            del z, t
        if frozen:
            ctx.save_for_backward(u, v if v is not None else ent)
        else:
            ctx.save_for_backward(hidden, weight, bias, targets, lse, ent)
        ctx.args = (temperature, scale, softcap, dtype, with_entropy, chunk, frozen)
        ctx.live = live  # [n_live] indices of the tokens backward recomputes; None: every token
        if not with_entropy:
            ctx.mark_non_differentiable(ent)
        return logp, ent

    @staticmethod
    def backward(ctx, grad_logp, grad_ent):  # type: ignore[override]
        temperature, scale, softcap, dtype, with_entropy, chunk, frozen = ctx.args
        none = (None,) * 9
        if frozen:
            u, v = ctx.saved_tensors
            grad_h = u * grad_logp.unsqueeze(-1).to(u.dtype)
            if with_entropy:
                grad_h += v * grad_ent.unsqueeze(-1).to(v.dtype)
            return (grad_h, None, None, *none)
        hidden, weight, bias, targets, lse, ent = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        grad_h = torch.zeros_like(hidden) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        grad_b = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if need_b else None
        # tokens the caller said get no upstream gradient (tool output) add nothing: skip their logits
        idx = ctx.live
        n = hidden.shape[0] if idx is None else idx.shape[0]
        w = weight.to(dtype)  # cast once for every chunk
        b = None if bias is None else bias.to(dtype)
        for s in range(0, n, chunk):
            rows = slice(s, s + chunk) if idx is None else idx[s : s + chunk]
            h = hidden[rows]
            z, t = head_logits(h, w, b, scale, softcap, dtype)
            if temperature != 1.0:
                z.div_(temperature)
            gz = _grad_y(z, t, lse[rows], ent[rows] if with_entropy else None, targets[rows], grad_logp[rows],
                         grad_ent[rows] if with_entropy else None, temperature, scale)
            del z, t
            gy = gz.to(dtype)
            if need_h:
                grad_h[rows] = (gy @ w).to(hidden.dtype)
            if need_w and dtype == torch.float32:
                grad_w.addmm_(gy.t(), h.float())
            elif need_w:  # adds the low-precision product into float32 without a float32 copy of it
                grad_w.add_(gy.t() @ h.to(dtype))
            if need_b:
                grad_b += gz.sum(0)
        return (grad_h, None if grad_w is None else grad_w.to(weight.dtype),
                None if grad_b is None else grad_b.to(bias.dtype), *none)


def _grad_y(z: torch.Tensor, t: torch.Tensor | None, lse: torch.Tensor, ent: torch.Tensor | None,
            targets: torch.Tensor, g_lp: torch.Tensor, g_ent: torch.Tensor | None, temperature: float,
            scale: float) -> torch.Tensor:
    """``d/dy sum_i (g_lp_i log p_i(y_i) + g_ent_i H_i)`` for one chunk, float32 [c, V], where ``z`` holds the
    chunk's logits / temperature and ``t`` the tanh of a soft cap. Both are overwritten (no [c, V] copies)."""
    log_p = z.sub_(lse.unsqueeze(-1))
    p = log_p.exp() if g_ent is not None else log_p.exp_()
    g = g_lp.unsqueeze(-1)
    if g_ent is not None:  # -g_ent p (log p + H)
        log_p.add_(ent.unsqueeze(-1)).mul_(p).mul_(-g_ent.unsqueeze(-1))
    gz = p.mul_(-g)
    gz.scatter_add_(-1, targets.unsqueeze(-1), g)
    if g_ent is not None:
        gz.add_(log_p)
    if temperature != 1.0:
        gz.div_(temperature)
    if t is not None:
        gz.mul_(t.mul_(t).neg_().add_(1.0))  # tanh' = 1 - tanh^2
    if scale != 1.0:
        gz.mul_(scale)
    return gz


def logits_match(ours: torch.Tensor, theirs: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether the head reproduces the model's own logits (float32 [n, V] each), up to the compute dtype's
    rounding: a model with an unknown transform of its head's output fails this."""
    tol = 1e-4 if dtype in (torch.float32, torch.float64) else 2e-2
    scale = 1.0 + float(theirs.abs().max())
    return bool(torch.isfinite(ours).all()) and float((ours - theirs).abs().max()) <= tol * scale and \
        math.isfinite(scale)
