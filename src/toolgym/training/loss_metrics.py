"""The logged metrics of ``policy_loss``: built from a few sums over policy tokens and the capped ratios,
the same way on the tensor and the fused (numba) paths."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

if TYPE_CHECKING:
    from toolgym.training.losses import ClipConfig

_QUANTILES = (0.25, 0.5, 0.75, 0.9, 0.95, 0.99)
_MAX_QUANTILE_SAMPLES = 1 << 15  # quantiles are for logging: a 32k-token strided sample is plenty


@dataclass
class LossSummary:
    """Sums over policy tokens from which the metrics are built (tensor and fused paths alike)."""

    loss: float
    tokens: float
    seqs: float
    clip_high: float
    clip_low: float
    clip_dual: float
    delta: float  # Σ Δ
    k3: float  # Σ (e^Δ - 1 - Δ)
    scale: float  # Σ t^p (Σ 1 without a position-adaptive window)
    max_tokens: float  # the largest per-row policy-token count


def _strided_sample(x: Tensor) -> Tensor:
    """An evenly strided subsample of at most ``_MAX_QUANTILE_SAMPLES`` values (quantiles are for logging)."""
    return x[:: x.numel() // _MAX_QUANTILE_SAMPLES + 1] if x.numel() > _MAX_QUANTILE_SAMPLES else x


def finish_metrics(s: LossSummary, rho: Tensor, clip: ClipConfig | None) -> dict[str, float]:
    """The logged metrics from the sums and the (capped) ratios ``rho`` at policy tokens."""
    denom = max(s.tokens, 1.0)
    out = {
        "loss": s.loss, "tokens": s.tokens, "seqs": s.seqs,
        "clip_frac_high": s.clip_high / denom, "clip_frac_low": s.clip_low / denom,
        "clip_frac_dual": s.clip_dual / denom, "approx_kl": -s.delta / denom, "kl_k3": s.k3 / denom,
    }
    out["clip_frac"] = out["clip_frac_high"] + out["clip_frac_low"] + out["clip_frac_dual"]
    if s.tokens > 0:
        sample = _strided_sample(rho)
        q = np.quantile(sample.to(torch.float64).numpy(), _QUANTILES)  # linear interpolation, as torch.quantile
        mean, low, high = torch.stack([rho.mean(), rho.min(), rho.max()]).tolist()
        out.update(ratio_mean=mean, ratio_min=low, ratio_max=high)
        out.update({f"ratio_p{round(p * 100)}": float(v) for p, v in zip(_QUANTILES, q, strict=True)})
        if clip is not None and clip.mode == "adaptive":
            # t^p over policy tokens: t runs 1..n_i in row i, so min is 1 and max is (max n_i)^p
            out.update(scale_mean=s.scale / denom, scale_min=1.0, scale_max=s.max_tokens ** clip.power)
    return out
