"""Policy-gradient losses: CTPO's cumulative prefix ratio and the GRPO/GSPO/full-IS baselines.

Pure functions over padded ``[B, T]`` tensors and a policy-token mask (the algorithms: docs/algorithms/ctpo.md
and docs/algorithms/baselines.md).
The trainer only orchestrates; everything numerical about the ratio, the clip and the
aggregation lives here so that it can be tested exactly.

How the clipped PPO surrogate is evaluated. Per policy token it is (docs/algorithms/ctpo.md, "Clipping")

    u = max(-A·ρ, -A·ρ̄),   ρ̄ = ρ clamped to the trust region [lo, hi]
    u = min(u, -A·c)        for A < 0 (dual clip at threshold c)

For A > 0 this equals ``-A·min(ρ, hi)``; for A < 0 it equals ``|A|·clamp(ρ, lo, c)``; for A = 0
it is 0. So ``u = -A·clamp(ρ, lower(A), upper(A))`` with sign-dependent bounds: the same value
and the same gradient (zero outside the bounds, ``-A·ρ·∇log π`` inside), evaluated with one
clamp. The clamp is done in log space for both clip modes (exp is monotone), where it also
absorbs the ``log ρ ≤ 10`` cap. Tests compare this against a literal transcription of the max/min form.

Two implementations. On CPU, ``policy_loss`` runs a one-pass numba kernel (``fused_loss``): eager
ops each stream the whole batch through memory, which made CTPO's prefix sum and positions cost
about a third more than GRPO; ``fused=False`` or ``TOOLGYM_FUSED_LOSS=0`` selects the tensor path
below, which runs on GPUs and is what the kernel is tested against.

Non-finite inputs. ``policy_loss`` raises :class:`NonFiniteInputError` (a ``ValueError``) when a
policy token (mask 1) has a NaN/inf log-prob, or a row with policy tokens has a non-finite
advantage or ``seq_weight``. It never folds them in. Values at mask-0 positions are ignored,
whatever they are, so the trainer drops bad rows by zeroing their mask: see :func:`finite_rows`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from toolgym.training.config_schema import AGGS, RATIOS
from toolgym.training.policy_gradient.clip import CLIP_MODES, ClipConfig
from toolgym.training.policy_gradient.loss_metrics import finish_metrics, to_floats

__all__ = ["AGGS", "CLIP_MODES", "RATIOS", "ClipConfig", "NonFiniteInputError", "TokenTerms", "clip_flags",
           "finite_rows", "log_window", "mismatch_weight", "per_token_loss", "policy_loss", "positions"]

DELTA_CLAMP = 20.0  # |log π - log π_b| per token is clamped to this (values only)
LOG_RATIO_CAP = 10.0  # upper cap on the log-ratio used as importance weight
MISMATCH_CAP = 5.0  # default truncation of the rollout-vs-trainer weight (docs/algorithms/ctpo.md)
_NO_LOWER = -1e30  # "no lower bound" in log space, finite so that it can be scaled by t^p


class NonFiniteInputError(ValueError):
    """A policy token carries NaN/inf. Drop such rows first (see ``finite_rows``)."""


def _allowed(name: str, value: Any, allowed: tuple[str, ...]) -> ValueError:
    return ValueError(f"{name} must be one of {', '.join(repr(a) for a in allowed)}; got {value!r}")


def log_window(t: Tensor | float, clip: ClipConfig) -> tuple[Tensor, Tensor]:
    """Log-space trust region ``(lower, upper)`` of ``log ρ`` at 1-indexed policy position(s) ``t``."""
    t = torch.as_tensor(t, dtype=torch.float64)
    if clip.mode == "fixed":
        lo = math.log(1.0 - clip.eps_low) if clip.eps_low < 1 else -math.inf
        hi = math.log1p(clip.eps_high)
        return torch.full_like(t, lo), torch.full_like(t, hi)
    scale = t.clamp_min(1.0).pow(clip.power)
    return -clip.eps_low * scale, clip.eps_high * scale


def positions(mask: Tensor) -> Tensor:
    """1-indexed count of policy tokens so far (mask-0 tokens do not advance it); 0 before the first."""
    return (mask != 0).to(torch.int64).cumsum(dim=-1)


def mismatch_weight(old_logp: Tensor, rollout_logp: Tensor, mask: Tensor, cap: float = MISMATCH_CAP) -> Tensor:
    """Per-sequence rollout-vs-trainer weight ``min(exp(Σ mask·(old - rollout)), cap)``, detached
    (docs/algorithms/ctpo.md, "Rollout-vs-trainer mismatch weight").

    Computed once per rollout batch and passed to ``policy_loss(seq_weight=...)``. NaN at a
    policy token gives a NaN weight, which ``finite_rows`` then flags.
    """
    if old_logp.shape != rollout_logp.shape or old_logp.shape != mask.shape:
        raise ValueError(
            f"old_logp, rollout_logp and mask must share one shape; got {tuple(old_logp.shape)}, "
            f"{tuple(rollout_logp.shape)}, {tuple(mask.shape)}"
        )
    if not cap > 0:
        raise ValueError(f"cap must be > 0; got {cap!r}")
    dt = torch.promote_types(old_logp.dtype, torch.float32)
    m = mask != 0
    diff = torch.where(m, old_logp.detach().to(dt) - rollout_logp.detach().to(dt), 0.0)
    return diff.sum(dim=-1).exp().clamp(max=cap)  # exp may overflow to inf; the cap then applies


def finite_rows(mask: Tensor, *tensors: Tensor | None) -> Tensor:
    """Bool ``[B]``: True where every policy-token entry of each ``[B, T]`` tensor and each ``[B]`` entry is finite.

    The trainer uses it to skip and count bad sequences: ``ok = finite_rows(mask, logp, old_logp, adv)``,
    then ``mask = mask * ok[:, None]`` (``policy_loss`` ignores everything at mask-0 positions).
    """
    m = mask != 0
    ok = torch.ones(mask.shape[0], dtype=torch.bool, device=mask.device)
    for x in tensors:
        if x is None:
            continue
        x = x.detach()
        if x.dim() == 1:
            ok &= torch.isfinite(x)
        elif x.shape == mask.shape:
            ok &= (torch.isfinite(x) | ~m).all(dim=-1)
        else:
            raise ValueError(f"finite_rows takes [B] or [B, T] tensors like mask {tuple(mask.shape)}; got {tuple(x.shape)}")
    return ok


@dataclass
class TokenTerms:
    """Per-token pieces of the loss, for tests and diagnostics (all ``[B, T]``, 0 at mask-0 positions)."""

    loss: Tensor  # u, with gradient
    ratio: Tensor  # ρ used as the importance weight (after the cap), detached
    log_ratio: Tensor  # its log, detached
    delta: Tensor  # clamped per-token log-ratio Δ, detached
    mask: Tensor  # bool
    positions: Tensor  # 1-indexed policy position t (int64)
    clip_high: Tensor  # bool: A>0 and ρ above the window
    clip_low: Tensor  # bool: A<0 and ρ below the window
    clip_dual: Tensor  # bool: A<0 and the dual clip binds


class _Core:
    """Intermediate tensors shared by the loss, the per-token view and the metrics."""

    def __init__(self, rho_c: Tensor, log_w: Tensor | None, delta: Tensor, mf: Tensor, adv: Tensor, scale: Tensor | None) -> None:
        self.rho_c = rho_c  # clipped weight exp(clamp(log w, lower, upper)), with gradient
        self._log_w = log_w  # detached log ratio after the cap at 10 (None when built with keep=False)
        self.delta = delta  # clamped Δ, 0 at mask-0 positions
        self.mf = mf  # float mask
        self.adv = adv  # [B, 1], or [B, T] with 0 at mask-0 positions
        self.scale = scale  # t^p (adaptive, p != 0); 0 before a row's first policy token
        self._m: Tensor | None = None

    @property
    def m(self) -> Tensor:
        if self._m is None:
            self._m = self.mf > 0
        return self._m

    @property
    def log_w(self) -> Tensor:
        assert self._log_w is not None, "built with keep=False"
        return self._log_w


def _check_shapes(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, seq_weight: Tensor | None) -> None:
    if logp.dim() != 2:
        raise ValueError(f"logp must be a [B, T] tensor; got shape {tuple(logp.shape)}")
    shape = tuple(logp.shape)
    if tuple(old_logp.shape) != shape:
        raise ValueError(f"old_logp must have the shape of logp {shape}; got {tuple(old_logp.shape)}")
    if tuple(mask.shape) != shape:
        raise ValueError(f"mask must have the shape of logp {shape}; got {tuple(mask.shape)}")
    if tuple(advantages.shape) not in ((shape[0],), shape):
        raise ValueError(f"advantages must have shape [B]={shape[:1]} or [B, T]={shape}; got {tuple(advantages.shape)}")
    if seq_weight is not None and tuple(seq_weight.shape) != (shape[0],):
        raise ValueError(f"seq_weight must have shape [B]={shape[:1]}; got {tuple(seq_weight.shape)}")
    if not logp.is_floating_point():
        raise ValueError(f"logp must be a floating-point tensor; got {logp.dtype}")


def _nonfinite(name: str, bad_rows: Tensor) -> NonFiniteInputError:
    rows = bad_rows.nonzero().flatten().tolist()
    return NonFiniteInputError(
        f"{name} has NaN/inf at policy tokens of {len(rows)} sequence(s) (rows {rows[:8]}); "
        "drop them first: ok = finite_rows(mask, logp, old_logp, advantages); mask = mask * ok[:, None]"
    )


def _core(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    ratio: str,
    clip: ClipConfig | None,
    keep: bool = True,
    check_finite: bool = True,
) -> _Core:
    """The clipped weight with its graph; ``keep=False`` lets detached buffers be overwritten
    in place (fewer fresh allocations) when no metrics will read them. ``check_finite=False``: the caller
    dropped non-finite rows on the device (:func:`finite_rows`), so no host read looks for them here."""
    dt = torch.promote_types(logp.dtype, torch.float32)  # float32 math for bf16/fp16, float64 kept
    mf = mask.to(dt) if mask.dtype == torch.bool else (mask != 0).to(dt)
    lp = logp.to(dt)
    lp_det = lp.detach()
    old = old_logp.detach().to(dt)

    # One reduction tells whether anything is non-finite; only then look where. Non-finite
    # values at policy tokens are an error; at mask-0 positions they are replaced by 0 so
    # that they reach neither the value nor the backward pass.
    if not check_finite or bool(torch.isfinite(lp_det.sum() + old.sum())):
        delta = (lp_det - old).clamp_(-DELTA_CLAMP, DELTA_CLAMP).mul_(mf)
    else:
        m = mf > 0
        for name, v in (("logp", lp_det), ("old_logp", old)):
            bad = (~torch.isfinite(v) & m).any(dim=-1)
            if bad.any():
                raise _nonfinite(name, bad)
        lp = torch.where(m, lp, 0.0)
        lp_det = lp.detach()
        old = torch.where(m, old, 0.0)
        delta = (lp_det - old).clamp_(-DELTA_CLAMP, DELTA_CLAMP)

    if ratio == "token":
        x = delta
    elif ratio == "cumulative":
        x = delta.cumsum(dim=-1) if keep else delta.cumsum_(dim=-1)  # (keep: the metrics read delta)
    else:
        total = delta.sum(dim=-1, keepdim=True)
        if ratio == "gspo":
            total = total / mf.sum(dim=-1, keepdim=True).clamp_min(1.0)
        x = total.expand_as(delta)

    # The capped log-ratio the metrics read, taken once here, before x's buffer is reused.
    log_w = x.clamp(max=LOG_RATIO_CAP) if keep else None
    # Stop-gradient form: value x, gradient only through this token's own log-prob. x's buffer
    # is free to overwrite (and later to hold a bound) for "cumulative", and for "token" when no
    # metrics read delta (x is delta); sequence/gspo x are broadcast views.
    x_free = ratio == "cumulative" or (ratio == "token" and not keep)
    if x_free:
        log_w_live = lp + x.sub_(lp_det)
    else:
        log_w_live = lp + (x - lp_det)

    adv = advantages.detach().to(dt)
    if adv.dim() == 1:
        rows = mf.sum(dim=-1) > 0
        if check_finite and not bool(torch.isfinite(torch.where(rows, adv, 0.0).sum())):
            raise _nonfinite("advantages", rows & ~torch.isfinite(adv))
        adv = torch.where(rows, adv, 0.0).unsqueeze(-1)
    else:
        m = mf > 0
        adv = torch.where(m, adv, 0.0)
        if check_finite and not bool(torch.isfinite(adv.sum())):
            raise _nonfinite("advantages", (~torch.isfinite(adv)).any(dim=-1))

    scale = None
    if clip is None:
        rho_c = log_w_live.clamp(max=LOG_RATIO_CAP).exp()
    else:
        neg = adv < 0
        if clip.mode == "fixed":
            lo_pos = -math.inf
            lo_neg = math.log(1.0 - clip.eps_low) if clip.eps_low < 1 else -math.inf
            hi_pos = min(math.log1p(clip.eps_high), LOG_RATIO_CAP)
            hi_neg = min(math.log(clip.dual), LOG_RATIO_CAP) if clip.dual is not None else LOG_RATIO_CAP
            lower = _select(neg, lo_neg, lo_pos, dt)
            upper = _select(neg, hi_neg, hi_pos, dt)
        else:
            # Finite stand-ins for "no bound" keep ±inf·0 (rows or prefixes without policy
            # tokens have t = 0) from producing NaN; the cap at 10 bounds A<0 without a dual clip.
            hi_neg_base = clip.dual if clip.dual is not None else LOG_RATIO_CAP
            lower = _select(neg, -clip.eps_low, _NO_LOWER, dt)
            upper = _select(neg, hi_neg_base, clip.eps_high, dt)
            if clip.power != 0:
                t = mf.cumsum(dim=-1)
                scale = t.sqrt_() if clip.power == 0.5 else t.pow_(clip.power)
                if x_free:  # x's buffer is dead once log_w_live exists: reuse it (fewer fresh pages)
                    lower = torch.mul(lower, scale, out=x)
                else:
                    lower = lower * scale
                # with the defaults (dual == eps_high) the upper bound is the same for both signs
                if hi_neg_base != clip.eps_high:
                    upper = upper * scale
                elif keep:
                    upper = scale * clip.eps_high
                else:
                    upper, scale = scale.mul_(clip.eps_high), None
                # The cap at 10 only matters where a bound can exceed it (t^p large or no dual clip).
                if max(clip.eps_high, hi_neg_base) * float(mask.shape[-1]) ** clip.power >= LOG_RATIO_CAP:
                    upper = upper.clamp_(max=LOG_RATIO_CAP)
            else:
                upper = upper.clamp(max=LOG_RATIO_CAP)
        rho_c = torch.clamp(log_w_live, lower, upper).exp()

    return _Core(rho_c=rho_c, log_w=log_w, delta=delta, mf=mf, adv=adv, scale=scale)


def _select(cond: Tensor, a: float, b: float, dt: torch.dtype) -> Tensor:
    return torch.where(cond, torch.tensor(a, dtype=dt, device=cond.device), torch.tensor(b, dtype=dt, device=cond.device))


def _validate(ratio: str, agg: str, clip: ClipConfig | None) -> None:
    if ratio not in RATIOS:
        raise _allowed("ratio", ratio, RATIOS)
    if agg not in AGGS:
        raise _allowed("agg", agg, AGGS)
    if clip is not None and not isinstance(clip, ClipConfig):
        raise ValueError(f"clip must be None or a ClipConfig; got {type(clip).__name__}")


def _flags(lw: Tensor, scale: Tensor | float, adv: Tensor, m: Tensor | None, clip: ClipConfig | None) -> tuple[Tensor, Tensor, Tensor]:
    pos, neg = adv > 0, adv < 0
    if m is not None:
        pos, neg = pos & m, neg & m
    none = torch.zeros_like(lw, dtype=torch.bool)
    if clip is None:
        return none, none, none
    if clip.mode == "fixed":
        lo = math.log(1.0 - clip.eps_low) if clip.eps_low < 1 else -math.inf
        high = pos & (lw > math.log1p(clip.eps_high))
        low = neg & (lw < lo)
        dual = neg & (lw > math.log(clip.dual)) if clip.dual is not None else none
        return high, low, dual
    z = lw / scale if isinstance(scale, Tensor) else lw  # log ρ in units of t^p: scalar comparisons
    high = pos & (z > clip.eps_high)
    low = neg & (z < -clip.eps_low)
    dual = neg & (z > clip.dual) if clip.dual is not None else none
    return high, low, dual


def clip_flags(log_ratio: Tensor, positions: Tensor, advantages: Tensor, clip: ClipConfig | None) -> tuple[Tensor, Tensor, Tensor]:
    """Sign-aware clip events ``(high, low, dual)`` for log-ratios at 1-indexed policy positions.

    high: A>0 and ρ above the window; low: A<0 and ρ below it; dual: A<0 and the dual clip binds
    (docs/algorithms/ctpo.md, "Clipping"). Arguments broadcast against each other. ``policy_loss`` counts
    with this rule.
    """
    scale: Tensor | float = 1.0
    if clip is not None and clip.mode == "adaptive" and clip.power != 0:
        scale = positions.to(log_ratio.dtype).clamp_min(1.0).pow(clip.power)
    return _flags(log_ratio, scale, advantages, None, clip)


def _clip_flags(core: _Core, clip: ClipConfig | None) -> tuple[Tensor, Tensor, Tensor]:
    scale = core.scale if core.scale is not None else 1.0
    return _flags(core.log_w, scale, core.adv, core.m, clip)


def per_token_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    ratio: str = "cumulative",
    clip: ClipConfig | None = None,
) -> TokenTerms:
    """The per-token surrogate ``u`` and its ingredients, before aggregation (same math as ``policy_loss``)."""
    _validate(ratio, "token-mean", clip)
    _check_shapes(logp, old_logp, advantages, mask, None)
    core = _core(logp, old_logp, advantages, mask, ratio, clip)
    u = -core.adv * core.rho_c * core.mf  # every factor is finite here, so a product masks exactly
    high, low, dual = _clip_flags(core, clip)
    log_w = core.log_w * core.mf
    return TokenTerms(
        loss=u,
        ratio=log_w.exp() * core.mf,
        log_ratio=log_w,
        delta=core.delta,
        mask=core.m,
        positions=positions(mask),
        clip_high=high,
        clip_low=low,
        clip_dual=dual,
    )


def _count(value: float | int | Tensor, dt: torch.dtype, device: torch.device) -> Tensor:
    """A global count (a Python number, or a 0-dim tensor on any device) as a 0-dim tensor beside the loss."""
    if isinstance(value, Tensor) and value.numel() != 1:
        raise ValueError(f"a global count must be a number or a 1-element tensor; got shape {tuple(value.shape)}")
    return torch.as_tensor(value, dtype=dt, device=device).reshape(())


def _row_coefficients(
    m: Tensor,
    dt: torch.dtype,
    agg: str,
    seq_weight: Tensor | None,
    global_token_count: float | int | Tensor | None,
    global_seq_count: float | int | Tensor | None,
    check_finite: bool = True,
) -> Tensor:
    """Per-row factor ``c_i`` such that ``loss = Σ_{i,t} mask·u·c_i`` for the chosen aggregation (``m``: bool mask)."""
    if agg == "token-mean":
        if global_seq_count is not None:
            raise ValueError("global_seq_count applies to the seq-mean aggregations; use global_token_count with 'token-mean'")
        n = m.sum().to(dt) if global_token_count is None else _count(global_token_count, dt, m.device)
        coef = (1.0 / n.clamp_min(1.0)).expand(m.shape[0])
    else:
        if global_token_count is not None:
            raise ValueError(f"global_token_count applies to agg='token-mean' only; use global_seq_count with {agg!r}")
        n_tok = m.sum(dim=-1).to(dt)
        nonempty = (n_tok > 0).to(dt)
        n_seq = nonempty.sum() if global_seq_count is None else _count(global_seq_count, dt, m.device)
        coef = nonempty / n_seq.clamp_min(1.0)
        if agg == "seq-mean-token-mean":
            coef = coef / n_tok.clamp_min(1.0)
    if seq_weight is not None:
        w = seq_weight.detach().to(dt)
        rows = m.any(dim=-1)
        if check_finite and not torch.isfinite(torch.where(rows, w, 0.0).sum()):
            raise _nonfinite("seq_weight", rows & ~torch.isfinite(w))
        coef = coef * torch.where(rows, w, 0.0)
    return coef


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    ratio: str = "cumulative",
    clip: ClipConfig | None = None,
    agg: str = "token-mean",
    seq_weight: Tensor | None = None,
    global_token_count: float | int | Tensor | None = None,
    *,
    global_seq_count: float | int | Tensor | None = None,
    compute_metrics: bool = True,
    fused: bool = True,
    metrics_on_device: bool = False,
    check_finite: bool = True,
) -> tuple[Tensor, dict[str, float]] | tuple[Tensor, dict[str, Tensor]]:
    """Clipped importance-weighted policy-gradient loss and cheap metrics.

    ``ratio``: ``"cumulative"`` (CTPO ρ_t), ``"token"`` (GRPO r_t), ``"sequence"`` (full IS ρ_H on every
    token) or ``"gspo"`` (geometric mean exp(mean Δ)); all in the stop-gradient form
    ``log w = sg(x) + logp - sg(logp)`` with ``log w ≤ 10``. ``agg``: ``"token-mean"`` divides by the
    policy-token count (``global_token_count`` when given, for micro-batches of one mini-batch);
    the seq-mean forms average over sequences with at least one policy token (``global_seq_count``
    overrides that count). ``seq_weight``: optional detached per-sequence factor (e.g.
    :func:`mismatch_weight`). Raises ``NonFiniteInputError`` on NaN/inf at policy tokens.
    ``fused``: on CPU, use the one-pass kernel when numba is installed (same values and gradient).
    ``metrics_on_device``: the metrics as 0-dim tensors on the loss's device, read by nobody yet (a trainer
    reads them once per step); by default they are Python floats, one host read per call.
    ``check_finite=False``: the caller has already dropped rows with NaN/inf on the device
    (``mask * finite_rows(mask, logp, old_logp, advantages)[:, None]``, values at mask-0 positions zeroed), so
    the loss does not read the device to look for them (a trainer's inner loop); one left in gives a NaN loss.
    """
    _validate(ratio, agg, clip)
    _check_shapes(logp, old_logp, advantages, mask, seq_weight)
    if fused and logp.device.type == "cpu" and _fused_loss_enabled():
        out = _policy_loss_fused(logp, old_logp, advantages, mask, ratio, clip, agg, seq_weight,
                                 global_token_count, global_seq_count, compute_metrics)
        if out is not None:  # None: a non-finite input; the tensor path below raises the precise error
            return out[0], out[1] if metrics_on_device else to_floats(out[1])
    core = _core(logp, old_logp, advantages, mask, ratio, clip, keep=compute_metrics, check_finite=check_finite)
    coef = _row_coefficients(core.m if compute_metrics else core.mf > 0, core.mf.dtype, agg, seq_weight,
                             global_token_count, global_seq_count, check_finite)
    row = -core.adv * coef.unsqueeze(-1)
    # mf is a fresh tensor owned by this call; without metrics nothing reads it again
    k = row * core.mf if compute_metrics else core.mf.mul_(row)
    loss = (core.rho_c * k).sum()
    if not compute_metrics:
        return loss, {}
    metrics = _metrics(core, clip, loss)
    return loss, metrics if metrics_on_device else to_floats(metrics)


def _fused_loss_enabled() -> bool:
    from toolgym.training.policy_gradient import fused_loss

    return fused_loss.enabled()


def _kernel_bounds(clip: ClipConfig | None) -> dict[str, float]:
    """Log-space window bases (scaled by t^p in the kernel) and clip-flag thresholds, as in ``_core``/``_flags``."""
    inf = math.inf
    b = {"power": 0.0, "cap": LOG_RATIO_CAP, "dclamp": DELTA_CLAMP, "lo_pos": -inf, "lo_neg": -inf,
         "hi_pos": LOG_RATIO_CAP, "hi_neg": LOG_RATIO_CAP, "th_high": inf, "th_low": -inf, "th_dual": inf,
         "scaled_flags": False}
    if clip is None:
        return b
    if clip.mode == "fixed":
        lo = math.log(1.0 - clip.eps_low) if clip.eps_low < 1 else -inf
        b.update(lo_neg=lo, hi_pos=min(math.log1p(clip.eps_high), LOG_RATIO_CAP),
                 hi_neg=min(math.log(clip.dual), LOG_RATIO_CAP) if clip.dual is not None else LOG_RATIO_CAP,
                 th_high=math.log1p(clip.eps_high), th_low=lo,
                 th_dual=math.log(clip.dual) if clip.dual is not None else inf)
        return b
    b.update(power=float(clip.power), lo_neg=-clip.eps_low, lo_pos=_NO_LOWER, hi_pos=clip.eps_high,
             hi_neg=clip.dual if clip.dual is not None else LOG_RATIO_CAP, th_high=clip.eps_high,
             th_low=-clip.eps_low, th_dual=clip.dual if clip.dual is not None else inf,
             scaled_flags=clip.power != 0)
    return b


def _policy_loss_fused(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    ratio: str,
    clip: ClipConfig | None,
    agg: str,
    seq_weight: Tensor | None,
    global_token_count: float | int | Tensor | None,
    global_seq_count: float | int | Tensor | None,
    compute_metrics: bool,
) -> tuple[Tensor, dict[str, Tensor]] | None:
    from toolgym.training.policy_gradient.fused_loss import fused_policy_loss

    dt = torch.promote_types(logp.dtype, torch.float32)
    m = mask != 0
    coef = _row_coefficients(m, dt, agg, seq_weight, global_token_count, global_seq_count)
    res = fused_policy_loss(logp.to(dt), old_logp, advantages, m, coef, ratio, _kernel_bounds(clip), compute_metrics)
    if res is None:
        return None
    loss, stats, log_w, delta = res
    if not compute_metrics:
        return loss, {}
    n_row = stats[:, 1]
    sums = stats[:, 2:7].sum(dim=0)
    summary = torch.cat([torch.stack([loss.detach().to(torch.float64), n_row.sum(), (n_row > 0).sum().to(torch.float64)]),
                         sums[:4], (delta.exp() - 1.0 - delta).sum().to(torch.float64).reshape(1), sums[4:5],
                         (n_row.max() if n_row.numel() else torch.zeros((), dtype=torch.float64)).reshape(1)])
    return loss, finish_metrics(summary, log_w.exp_(), clip)


def _metrics(core: _Core, clip: ClipConfig | None, loss: Tensor) -> dict[str, Tensor]:
    m = core.m
    mf = core.mf
    high, low, dual = _clip_flags(core, clip)
    d = core.delta
    n_row = mf.sum(dim=-1)
    scale_sum = torch.dot(core.scale.view(-1), mf.view(-1)) if core.scale is not None else n_row.sum()
    summary = torch.stack([
        loss.detach().to(d.dtype), n_row.sum(), (n_row > 0).sum().to(d.dtype), high.sum().to(d.dtype),
        low.sum().to(d.dtype), dual.sum().to(d.dtype), d.sum(),
        torch.dot(d.exp().sub_(1.0).sub_(d).view(-1), mf.view(-1)), scale_sum,
        n_row.max() if n_row.numel() else torch.zeros((), dtype=d.dtype, device=d.device),
    ])
    return finish_metrics(summary, core.log_w.exp(), clip, valid=m)
