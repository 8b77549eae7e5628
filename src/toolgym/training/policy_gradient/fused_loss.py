"""One-pass CPU kernel for ``policy_loss`` (numba), used instead of the eager tensor path on CPU.

Why: on CPU every eager op streams the whole ``[B, T]`` batch through memory, so CTPO's extra
operations (the prefix sum of log-ratios, the policy-position count and ``t^p``) cost about a
third of GRPO's whole forward+backward. Here one loop per row does the clamp, the prefix sum,
the position, the window, ``exp``, the loss term and the gradient together; the extra work of
CTPO is then a few scalar operations per token. The backward pass is one multiply, because the
derivative of the loss with respect to each log-prob (``k·ρ̄`` inside the window, 0 outside) is
known in the forward pass. The tensor path in ``losses.py`` stays the reference (GPU, no numba)
and tests check that both agree.

The kernel computes in float64 whatever the input dtype, reports non-finite inputs instead of
raising (the caller then reruns the tensor path, which raises the precise error), and returns
per-row sums from which ``losses`` builds the same metrics as its tensor path.
"""

from __future__ import annotations

import math
import os
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torch import Tensor

from toolgym.training.config_schema import RATIOS

# the kernel's code of each ratio the config accepts (>= 2: sequence-level, the row's total first)
RATIO_CODES = {"token": 0, "cumulative": 1, "sequence": 2, "gspo": 3}
if set(RATIO_CODES) != set(RATIOS):  # a ratio added to the config without a kernel branch fails here, not mid-run
    raise ImportError(f"fused_loss.RATIO_CODES covers {sorted(RATIO_CODES)}, the config's ratios are {sorted(RATIOS)}")
# per-row sums written by the kernel, in this order
STAT_KEYS = ("clipped_loss", "tokens", "clip_high", "clip_low", "clip_dual", "delta", "scale", "bad")


def enabled() -> bool:
    """False when ``TOOLGYM_FUSED_LOSS=0`` or numba is not installed (the tensor path is then used)."""
    if os.environ.get("TOOLGYM_FUSED_LOSS", "1") == "0":
        return False
    return _kernel() is not None


@lru_cache(maxsize=1)
def _kernel() -> Any:
    try:
        import numba
    except ImportError:
        return None

    @numba.njit(cache=True, nogil=True)
    def kernel(lp, old, mask, adv, coef, ratio, tab, cap, dclamp, th_high, th_low, th_dual,
               w_out, lw_out, d_out, offsets, want_metrics, stats):
        """Per token: the log weight where the clamp passes the gradient, -inf elsewhere (w_out), so
        that k·exp(w), k = -A·c, is both the loss term and its derivative there; exp is left to a
        vectorised tensor op. Clipped tokens (zero gradient) add their loss term here, in stats,
        from ``tab``: per position t, the window edges and their exponentials (rows: TABLE_ROWS)."""
        rows, width = lp.shape
        per_token_adv = adv.shape[1] == width
        for b in range(rows):
            # sequence-level ratios need the row's total first
            total = 0.0
            n = 0
            if ratio >= 2:
                for j in range(width):
                    if mask[b, j] != 0:
                        total += min(max(float(lp[b, j]) - float(old[b, j]), -dclamp), dclamp)
                        n += 1
                if ratio == 3:
                    total /= max(n, 1)
            c = float(coef[b])
            running = 0.0
            t = 0
            s_clipped = 0.0
            s_high = 0.0
            s_low = 0.0
            s_dual = 0.0
            s_delta = 0.0
            s_scale = 0.0
            bad = 0.0
            base = offsets[b]
            for j in range(width):
                if mask[b, j] == 0:
                    w_out[b, j] = -math.inf
                    continue
                a = float(adv[b, j]) if per_token_adv else float(adv[b, 0])
                d = float(lp[b, j]) - float(old[b, j])
                if not (math.isfinite(d) and math.isfinite(a) and math.isfinite(c)):
                    bad += 1.0
                    w_out[b, j] = -math.inf
                    continue
                d = min(max(d, -dclamp), dclamp)
                if ratio == 0:
                    x = d
                elif ratio == 1:
                    running += d
                    x = running
                else:
                    x = total
                neg = a < 0.0
                row = 0 if neg else 1
                lower = tab[row, t]
                upper = tab[row + 2, t]
                s = tab[4, t]  # t^p at this 1-indexed policy position
                t += 1
                k = -a * c
                below = x < lower
                above = x > upper
                w_out[b, j] = -math.inf if (below or above) else x
                edge = tab[5 + row, t - 1] if below else tab[7 + row, t - 1]
                s_clipped += k * edge if (below or above) else 0.0
                lw = min(x, cap)
                if a > 0.0 and lw > th_high * s:
                    s_high += 1.0
                if neg:
                    if lw < th_low * s:
                        s_low += 1.0
                    if lw > th_dual * s:
                        s_dual += 1.0
                s_delta += d
                s_scale += s
                if want_metrics:  # policy tokens only, row after row (offsets: each row's first slot)
                    lw_out[base + t - 1] = lw
                    d_out[base + t - 1] = d
            stats[b, 0] = s_clipped
            stats[b, 1] = t
            stats[b, 2] = s_high
            stats[b, 3] = s_low
            stats[b, 4] = s_dual
            stats[b, 5] = s_delta
            stats[b, 6] = s_scale
            stats[b, 7] = bad

    return kernel


TABLE_ROWS = ("lower A<0", "lower A>=0", "upper A<0", "upper A>=0", "t^p",
              "exp lower A<0", "exp lower A>=0", "exp upper A<0", "exp upper A>=0")


def edge_table(width: int, bounds: dict[str, float]) -> Tensor:
    """Float64 ``[len(TABLE_ROWS), width]``: the log-space window at positions t = 1..width and exp of its edges."""
    scale = torch.arange(1, width + 1, dtype=torch.float64).pow_(bounds["power"])
    edges = torch.stack([bounds["lo_neg"] * scale, bounds["lo_pos"] * scale,
                         (bounds["hi_neg"] * scale).clamp_(max=bounds["cap"]),
                         (bounds["hi_pos"] * scale).clamp_(max=bounds["cap"])])
    return torch.cat([edges, scale.unsqueeze(0), edges.exp()])


class _FusedLoss(torch.autograd.Function):
    """Scalar loss whose gradient with respect to ``logp`` was computed by the kernel."""

    @staticmethod
    def forward(ctx: Any, logp: Tensor, loss: Tensor, grad: Tensor) -> Tensor:  # noqa: ARG004 - logp carries the graph
        ctx.save_for_backward(grad)
        return loss

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor, None, None]:
        (grad,) = ctx.saved_tensors
        return grad * grad_out, None, None


def fused_policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    coef: Tensor,
    ratio: str,
    bounds: dict[str, float],
    want_metrics: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor] | None:
    """``(loss with graph, per-row stats [B, len(STAT_KEYS)], capped log-ratios, clamped Δ)``.

    None when an input is non-finite at a policy token. The last two hold the policy tokens only,
    row after row, and are empty unless ``want_metrics``. ``logp``: the float32/float64 tensor the
    gradient flows to; ``mask``: bool; ``coef``: the per-row aggregation factor (any sequence
    weight included); ``bounds``: window bases and flag thresholds, see ``losses._kernel_bounds``.
    """
    kernel = _kernel()
    dt = logp.dtype
    rows, width = logp.shape
    adv = advantages.detach().to(dt)
    adv = (adv.unsqueeze(-1) if adv.dim() == 1 else adv).contiguous()
    counts = mask.sum(dim=-1)
    offsets = counts.cumsum(0) - counts
    n_metric = int(counts.sum()) if want_metrics else 0
    tab = edge_table(width, bounds)
    w = torch.empty((rows, width), dtype=dt)
    lw = torch.empty(n_metric, dtype=dt)
    d = torch.empty(n_metric, dtype=dt)
    stats = np.zeros((rows, len(STAT_KEYS)), dtype=np.float64)
    args = [logp.detach().contiguous().numpy(), old_logp.detach().to(dt).contiguous().numpy(),
            mask.contiguous().view(torch.uint8).numpy(), adv.numpy(), coef.detach().to(torch.float64).contiguous().numpy(),
            RATIO_CODES[ratio], tab.numpy(), bounds["cap"], bounds["dclamp"], bounds["th_high"], bounds["th_low"],
            bounds["th_dual"], w.numpy(), lw.numpy(), d.numpy(), offsets.numpy(), want_metrics, stats]
    kernel(*args)
    stats_t = torch.from_numpy(stats)
    if stats_t[:, 7].any():
        return None
    # k = -A·c, 0 where nothing is taken (NaN/inf there must not reach 0·exp(-inf))
    k = torch.where(mask if adv.shape[1] == width else (counts > 0).unsqueeze(-1),
                    -adv * coef.detach().to(dt).unsqueeze(-1), 0.0)
    g = w.exp_().mul_(k)  # inside the window: loss term = its derivative = k·exp(w); clipped or masked: 0
    loss = g.sum() + stats_t[:, 0].sum().to(dt)
    return _FusedLoss.apply(logp, loss, g), stats_t, lw, d
