"""The one-pass CPU kernel (``fused_loss``) against the eager tensor path of ``policy_loss``.

test_losses.py checks ``policy_loss`` (the kernel, on CPU) against a literal transcription of the
spec; here the tensor path (what runs on GPUs) must give the same loss, gradient and metrics on
every ratio type, clip mode and aggregation, and both must treat bad input alike.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from toolgym.training.policy_gradient import fused_loss
from toolgym.training.policy_gradient.losses import ClipConfig, NonFiniteInputError, policy_loss

CLIPS = {
    "none": None,
    "ctpo": ClipConfig.ctpo(),
    "ctpo-no-dual-p0.7": ClipConfig("adaptive", 0.02, 0.04, 0.7, None),
    "adaptive-p0": ClipConfig("adaptive", 0.1, 0.2, 0.0, 0.3),
    "grpo": ClipConfig.grpo(),
    "gspo": ClipConfig.gspo(),
    "fixed-no-dual": ClipConfig("fixed", 0.2, 0.28, 0.0, None),
}


def test_kernel_is_available_here() -> None:
    # numba is the cpu extra, which scripts/setup.sh installs: CI must exercise the kernel, not silently fall back
    assert fused_loss.enabled()


def _inputs(dtype: torch.dtype, per_token_adv: bool, seed: int, drift: float = 0.1):
    g = torch.Generator().manual_seed(seed)
    b, t = 7, 61
    old = -torch.rand(b, t, generator=g, dtype=dtype) * 3
    logp = old + torch.randn(b, t, generator=g, dtype=dtype) * drift
    mask = (torch.rand(b, t, generator=g) > 0.3).float()
    mask[2] = 0  # a row without policy tokens
    mask[4, :3] = 0
    adv = torch.randn(b, t, generator=g, dtype=dtype) if per_token_adv else torch.randn(b, generator=g, dtype=dtype)
    if not per_token_adv:
        adv[5] = 0.0
    return logp, old, adv, mask


def _run(logp, old, adv, mask, fused: bool, **kw):
    lp = logp.clone().requires_grad_(True)
    loss, metrics = policy_loss(lp, old, adv, mask, fused=fused, **kw)
    loss.backward()
    return loss.detach(), lp.grad, metrics


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("ratio", ["token", "cumulative", "sequence", "gspo"])
@pytest.mark.parametrize("clip", list(CLIPS))
def test_kernel_matches_tensor_path(dtype: torch.dtype, ratio: str, clip: str) -> None:
    # float32: the kernel sums in float64, the tensor path in float32; exp of a long sum amplifies the difference
    rtol, atol = (1e-4, 1e-6) if dtype == torch.float32 else (1e-12, 1e-12)
    clipped = 0.0
    for seed, (agg, per_token_adv, drift) in enumerate(itertools.product(
            ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"], [False, True], [0.02, 0.5, 2.0])):
        logp, old, adv, mask = _inputs(dtype, per_token_adv, seed, drift)
        weight = torch.rand(logp.shape[0], dtype=dtype) + 0.5 if seed % 3 == 0 else None
        kw = {"ratio": ratio, "clip": CLIPS[clip], "agg": agg, "seq_weight": weight}
        f_loss, f_grad, f_m = _run(logp, old, adv, mask, True, **kw)
        t_loss, t_grad, t_m = _run(logp, old, adv, mask, False, **kw)
        assert f_loss.dtype == t_loss.dtype == dtype
        assert torch.allclose(f_loss, t_loss, rtol=rtol, atol=atol), (agg, per_token_adv, drift)
        assert torch.allclose(f_grad, t_grad, rtol=rtol, atol=atol), (agg, per_token_adv, drift)
        assert f_m.keys() == t_m.keys()
        for key in t_m:
            assert f_m[key] == pytest.approx(t_m[key], rel=1e-4, abs=1e-6), (key, agg, per_token_adv, drift)
        clipped += t_m["clip_frac"]
    if CLIPS[clip] is not None:
        assert clipped > 0  # the comparison covered clipped tokens, not only the inside of the window


def test_clipped_tokens_get_no_gradient() -> None:
    # cumulative log-ratios just outside / inside the CTPO window sqrt(t) * [-0.025, 0.05] at t = 1..4
    s = torch.arange(1, 5, dtype=torch.float64).sqrt()
    cum = torch.stack([0.05 * s + 1e-3, 0.05 * s - 1e-3, -0.025 * s + 1e-3, -0.025 * s - 1e-3])
    old = torch.full((4, 4), -1.0, dtype=torch.float64)
    logp = old + torch.diff(cum, dim=1, prepend=torch.zeros(4, 1, dtype=torch.float64))
    mask = torch.ones(4, 4)
    outside_for = {1.0: [0], -1.0: [0, 3]}  # A>0: above the upper edge; A<0: above the dual clip or below the lower edge
    for a, outside in outside_for.items():
        adv = torch.full((4,), a, dtype=torch.float64)
        f = _run(logp, old, adv, mask, True, ratio="cumulative", clip=ClipConfig.ctpo())
        r = _run(logp, old, adv, mask, False, ratio="cumulative", clip=ClipConfig.ctpo())
        assert torch.allclose(f[0], r[0], atol=1e-14) and torch.allclose(f[1], r[1], atol=1e-14)
        for row in range(4):
            assert bool((f[1][row] == 0).all()) == (row in outside), (a, row)


@pytest.mark.parametrize("fused", [True, False])
def test_nan_at_policy_token_raises_in_both_paths(fused: bool) -> None:
    logp, old, adv, mask = _inputs(torch.float32, False, 0)
    logp[1, 5], mask[1, 5] = float("nan"), 1.0
    with pytest.raises(NonFiniteInputError, match="logp has NaN/inf at policy tokens of 1 sequence"):
        policy_loss(logp.requires_grad_(True), old, adv, mask, ratio="cumulative", clip=ClipConfig.ctpo(), fused=fused)
    adv = adv.clone()
    adv[0] = float("inf")
    with pytest.raises(NonFiniteInputError, match="advantages"):
        policy_loss(old.clone(), old, adv, mask, ratio="cumulative", clip=ClipConfig.ctpo(), fused=fused)


def test_nan_at_masked_token_is_ignored_by_the_kernel() -> None:
    logp, old, adv, mask = _inputs(torch.float32, False, 1)
    clean = _run(logp, old, adv, mask, True, ratio="cumulative", clip=ClipConfig.ctpo())
    logp, old = logp.clone(), old.clone()
    logp[mask == 0], old[mask == 0] = float("nan"), float("-inf")
    dirty = _run(logp, old, adv, mask, True, ratio="cumulative", clip=ClipConfig.ctpo())
    assert torch.equal(clean[0], dirty[0]) and torch.equal(clean[1], dirty[1])
    assert clean[2] == dirty[2]


def test_bf16_log_probs_get_a_bf16_gradient() -> None:
    logp, old, adv, mask = _inputs(torch.float32, False, 2)
    lp = logp.to(torch.bfloat16).requires_grad_(True)
    loss, _ = policy_loss(lp, old, adv, mask, ratio="cumulative", clip=ClipConfig.ctpo())
    loss.backward()
    ref = _run(lp.detach().float(), old, adv, mask, False, ratio="cumulative", clip=ClipConfig.ctpo())
    assert loss.dtype == torch.float32 and lp.grad.dtype == torch.bfloat16
    assert torch.allclose(loss, ref[0], atol=1e-6)
    assert torch.allclose(lp.grad.float(), ref[1], atol=1e-2 * float(ref[1].abs().max()))


def test_env_switch_selects_the_tensor_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLGYM_FUSED_LOSS", "0")
    assert not fused_loss.enabled()
    calls = []
    monkeypatch.setattr(fused_loss, "fused_policy_loss", lambda *a, **k: calls.append(a))
    logp, old, adv, mask = _inputs(torch.float32, False, 3)
    policy_loss(logp, old, adv, mask, ratio="cumulative", clip=ClipConfig.ctpo())
    assert calls == []
    monkeypatch.setenv("TOOLGYM_FUSED_LOSS", "1")
    assert fused_loss.enabled()


def test_kernel_leaves_torch_thread_count_alone() -> None:
    # numba's own parallel layer would reset OpenMP's thread count under torch; the kernel must not
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        logp, old, adv, mask = _inputs(torch.float32, False, 4)
        _run(logp, old, adv, mask, True, ratio="cumulative", clip=ClipConfig.ctpo())
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
