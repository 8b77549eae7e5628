"""The logged metrics of ``policy_loss``: built from a few sums over policy tokens and the capped ratios,
the same way on the tensor and the fused (numba) paths.

Everything here stays on the loss's device as 0-dim tensors: no ``.numpy()``, no ``.item()``, no boolean
indexing (whose output size needs a host sync). A caller reads them once per step (the trainer) or once per
call (:func:`to_floats`, what ``policy_loss`` returns by default).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from toolgym.training.policy_gradient.clip import ClipConfig

_QUANTILES = (0.25, 0.5, 0.75, 0.9, 0.95, 0.99)
_MAX_QUANTILE_SAMPLES = 1 << 15  # quantiles are for logging: a 32k-value strided sample is plenty

#: the sums over policy tokens a summary vector holds, in order
SUMMARY_KEYS = ("loss", "tokens", "seqs", "clip_high", "clip_low", "clip_dual", "delta", "k3", "scale", "max_tokens")
#: metrics that describe the ratios, absent from :func:`to_floats` when a call had no policy token
RATIO_KEYS = ("ratio_mean", "ratio_min", "ratio_max", *(f"ratio_p{round(p * 100)}" for p in _QUANTILES),
              "scale_mean", "scale_min", "scale_max")


def _strided(x: Tensor) -> Tensor:
    """An evenly strided subsample of at most ``_MAX_QUANTILE_SAMPLES`` values (its stride is known on the host)."""
    return x[:: x.numel() // _MAX_QUANTILE_SAMPLES + 1] if x.numel() > _MAX_QUANTILE_SAMPLES else x


def _ratio_stats(rho: Tensor, valid: Tensor | None) -> dict[str, Tensor]:
    """Mean, min, max and linear-interpolation quantiles (as ``torch.quantile``) of ``rho`` where ``valid``.

    Masked values sort to the end as +inf; the quantile positions come from the valid count on the device, so
    nothing is synchronised. NaN when nothing is valid."""
    flat = rho.reshape(-1)
    ok = torch.ones_like(flat, dtype=torch.bool) if valid is None else valid.reshape(-1)
    n = ok.sum()
    any_ok = n > 0
    nan = torch.full((), math.nan, dtype=flat.dtype, device=flat.device)
    inf = torch.full((), math.inf, dtype=flat.dtype, device=flat.device)
    mean = torch.where(ok, flat, 0.0).sum() / n.clamp_min(1).to(flat.dtype)
    out = {"ratio_mean": mean, "ratio_min": torch.where(ok, flat, inf).amin() if flat.numel() else inf,
           "ratio_max": torch.where(ok, flat, -inf).amax() if flat.numel() else -inf}
    sample, sample_ok = _strided(flat), _strided(ok)
    if sample.numel():
        ordered = torch.where(sample_ok, sample, inf).sort().values
        ns = sample_ok.sum()
        qs = torch.tensor(_QUANTILES, dtype=torch.float64, device=flat.device)
        pos = qs * (ns - 1).clamp_min(0).to(torch.float64)
        lo, hi = pos.floor().long(), pos.ceil().long()
        q = torch.lerp(ordered[lo], ordered[hi], (pos - lo.to(torch.float64)).to(ordered.dtype))
        q = torch.where(ns > 0, q, nan)
        out.update({f"ratio_p{round(p * 100)}": v for p, v in zip(_QUANTILES, q.unbind(), strict=True)})
    else:
        out.update({f"ratio_p{round(p * 100)}": nan for p in _QUANTILES})
    return {k: torch.where(any_ok, v, nan) for k, v in out.items()}


def finish_metrics(summary: Tensor, rho: Tensor, clip: ClipConfig | None, valid: Tensor | None = None) -> dict[str, Tensor]:
    """The logged metrics, as 0-dim tensors on ``summary``'s device, from the sums (``SUMMARY_KEYS`` order) and the
    capped ratios ``rho`` (``valid``: which entries are policy tokens; None: all of them)."""
    s = dict(zip(SUMMARY_KEYS, summary.unbind(), strict=True))
    denom = s["tokens"].clamp_min(1.0)
    out = {
        "loss": s["loss"], "tokens": s["tokens"], "seqs": s["seqs"],
        "clip_frac_high": s["clip_high"] / denom, "clip_frac_low": s["clip_low"] / denom,
        "clip_frac_dual": s["clip_dual"] / denom, "approx_kl": -s["delta"] / denom, "kl_k3": s["k3"] / denom,
    }
    out["clip_frac"] = out["clip_frac_high"] + out["clip_frac_low"] + out["clip_frac_dual"]
    out.update(_ratio_stats(rho.to(summary.dtype), valid))
    if clip is not None and clip.mode == "adaptive":
        # t^p over policy tokens: t runs 1..n_i in row i, so min is 1 and max is (max n_i)^p
        out.update(scale_mean=s["scale"] / denom, scale_min=torch.ones_like(denom),
                   scale_max=s["max_tokens"].clamp_min(1.0) ** clip.power)
    return out


def to_floats(metrics: dict[str, Tensor | float]) -> dict[str, float]:
    """One host read of a metrics dict of 0-dim tensors and numbers (ratio statistics dropped when there was no
    policy token)."""
    keys = [k for k, v in metrics.items() if isinstance(v, Tensor)]
    out = {k: float(v) for k, v in metrics.items() if not isinstance(v, Tensor)}
    if keys:
        values = torch.stack([metrics[k].detach().reshape(()).to(torch.float64) for k in keys]).tolist()  # type: ignore[union-attr]
        out.update(zip(keys, values, strict=True))
    if out.get("tokens", 1.0) <= 0:
        for k in RATIO_KEYS:
            out.pop(k, None)
    return out
