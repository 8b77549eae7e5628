"""Loss unit tests (docs/algorithms/ctpo.md, baselines.md): golden values, stop-gradient, gating, windows,
aggregation, positions, masked-token invariance, safeguards, metrics and bad input.

Expected numbers come from the spec's golden table or from ``reference_loss`` below, a literal
scalar transcription of the spec's formulas (max-of-losses, dual-clip ``min``, per-token loops),
differentiated by autograd; the library evaluates the same surrogate in a fused form.
"""

from __future__ import annotations

import math

import pytest
import torch

from toolgym.training.policy_gradient.losses import (
    ClipConfig,
    NonFiniteInputError,
    finite_rows,
    log_window,
    mismatch_weight,
    per_token_loss,
    policy_loss,
    positions,
)

F64 = torch.float64
CTPO = ClipConfig(mode="adaptive", eps_low=0.025, eps_high=0.05, power=0.5, dual=0.05)
GRPO = ClipConfig(mode="fixed", eps_low=0.2, eps_high=0.2, dual=3.0)
GSPO = ClipConfig(mode="fixed", eps_low=3e-4, eps_high=4e-4, dual=None)


# ---------------------------------------------------------------- literal reference of the spec


def reference_loss(logp, old, adv, mask, ratio, clip, agg, seq_weight=None):
    """The ratio, clip and aggregation of docs/algorithms/ctpo.md and baselines.md written token by token
    (slow, obviously correct)."""
    b, t_len = logp.shape
    terms = {}
    for i in range(b):
        pol = [j for j in range(t_len) if mask[i, j] != 0]
        deltas = {j: torch.clamp(logp[i, j].detach() - old[i, j], -20, 20) for j in pol}
        total = sum((deltas[j] for j in pol), torch.tensor(0.0, dtype=F64))
        running = torch.tensor(0.0, dtype=F64)
        for t, j in enumerate(pol, start=1):
            running = running + deltas[j]
            x = {"token": deltas[j], "cumulative": running, "sequence": total, "gspo": total / len(pol)}[ratio]
            log_rho = x + logp[i, j] - logp[i, j].detach()
            log_rho = torch.clamp(log_rho, max=10.0)
            rho = torch.exp(log_rho)
            a = adv[i, j] if adv.dim() == 2 else adv[i]
            if clip is None:
                u = -a * rho
            else:
                if clip.mode == "adaptive":
                    scale = max(t, 1) ** clip.power
                    lo, hi = clip.eps_low * scale, clip.eps_high * scale
                    rho_bar = torch.exp(torch.clamp(log_rho, -lo, hi))
                    dual = math.exp(clip.dual * scale) if clip.dual is not None else None
                else:
                    rho_bar = torch.clamp(rho, 1 - clip.eps_low, 1 + clip.eps_high)
                    dual = clip.dual
                u = torch.maximum(-a * rho, -a * rho_bar)
                if a < 0 and dual is not None:
                    u = torch.minimum(u, -a * dual)
            if seq_weight is not None:
                u = u * seq_weight[i]
            terms[(i, j)] = u
    n_tok = sum(1 for _ in terms)
    rows = [[terms[(i, j)] for j in range(t_len) if (i, j) in terms] for i in range(b)]
    rows = [r for r in rows if r]
    if agg == "token-mean":
        return sum(sum(r) for r in rows) / max(n_tok, 1)
    if agg == "seq-mean-token-mean":
        return sum(sum(r) / len(r) for r in rows) / max(len(rows), 1)
    return sum(sum(r) for r in rows) / max(len(rows), 1)


def golden_inputs(with_tool: bool = True):
    mask = torch.tensor([[1, 1, 0, 1, 1, 1]] * 2)
    old = torch.tensor([[-1.0, -0.5, -2.0, -1.5, -0.8, -2.2]] * 2, dtype=F64)
    logp = old + torch.tensor([0.03, 0.01, 5.0, -0.2, 0.16, 0.3], dtype=F64)
    if not with_tool:
        keep = [0, 1, 3, 4, 5]
        mask, old, logp = mask[:, keep], old[:, keep], logp[:, keep]
    return logp.clone().requires_grad_(True), old, torch.tensor([1.0, -1.0], dtype=F64), mask


def loss_and_grad(logp, *args, **kwargs):
    logp = logp.detach().clone().requires_grad_(True)
    loss, metrics = policy_loss(logp, *args, **kwargs)
    loss.backward()
    return loss.detach(), logp.grad, metrics


def random_batch(seed: int, b: int = 5, t: int = 14, spread: float = 0.15, per_token_adv: bool = False):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g, dtype=F64) * 2
    logp = old + torch.randn(b, t, generator=g, dtype=F64) * spread
    mask = (torch.rand(b, t, generator=g) > 0.25).long()
    mask[:, -2:] = 0  # padding
    mask[-1] = 0  # a row without policy tokens
    adv = torch.randn(b, t, generator=g, dtype=F64) if per_token_adv else torch.randn(b, generator=g, dtype=F64)
    return logp, old, adv, mask


# ---------------------------------------------------------------- golden example


def test_golden_ctpo_table() -> None:
    logp, old, adv, mask = golden_inputs()
    terms = per_token_loss(logp, old, adv, mask, ratio="cumulative", clip=CTPO)
    pol = [0, 1, 3, 4, 5]
    assert terms.positions[0, pol].tolist() == [1, 2, 3, 4, 5]
    rho = [1.030455, 1.040811, 0.852144, 1.000000, 1.349859]
    assert torch.allclose(terms.ratio[0, pol], torch.tensor(rho, dtype=F64), atol=5e-7)
    u_pos = [-1.030455, -1.040811, -0.852144, -1.000000, -1.118293]
    u_neg = [1.030455, 1.040811, 0.957623, 1.000000, 1.118293]
    assert torch.allclose(terms.loss[0, pol].detach(), torch.tensor(u_pos, dtype=F64), atol=5e-7)
    assert torch.allclose(terms.loss[1, pol].detach(), torch.tensor(u_neg, dtype=F64), atol=5e-7)
    assert terms.ratio[:, 2].tolist() == [0.0, 0.0] and terms.loss[:, 2].tolist() == [0.0, 0.0]

    loss, grad, metrics = loss_and_grad(logp, old, adv, mask, ratio="cumulative", clip=CTPO, agg="token-mean")
    assert loss.item() == pytest.approx(0.0105479, abs=5e-8)
    g_pos = [-0.1030455, -0.1040811, 0.0, -0.0852144, -0.1000000, 0.0]
    g_neg = [0.1030455, 0.1040811, 0.0, 0.0, 0.1000000, 0.0]
    assert torch.allclose(grad, torch.tensor([g_pos, g_neg], dtype=F64), atol=5e-8)
    assert grad[:, 2].tolist() == [0.0, 0.0]  # the tool token
    assert metrics["clip_frac_high"] == pytest.approx(0.1)  # pos 6, A=+1
    assert metrics["clip_frac_low"] == pytest.approx(0.1)  # pos 4, A=-1
    assert metrics["clip_frac_dual"] == pytest.approx(0.1)  # pos 6, A=-1
    assert metrics["tokens"] == 10 and metrics["seqs"] == 2


def test_golden_variants() -> None:
    logp, old, adv, mask = golden_inputs()
    w = torch.tensor([0.5, 2.0], dtype=F64, requires_grad=True)
    loss, _, _ = loss_and_grad(logp, old, adv, mask, ratio="cumulative", clip=CTPO, seq_weight=w)
    assert loss.item() == pytest.approx(0.777351, abs=5e-7)
    assert w.grad is None  # the weight is detached

    base_grad = loss_and_grad(logp, old, adv, mask, ratio="cumulative", clip=CTPO)[1]
    flat = ClipConfig(mode="adaptive", eps_low=0.025, eps_high=0.05, power=0.0, dual=0.05)
    loss, grad, _ = loss_and_grad(logp, old, adv, mask, ratio="cumulative", clip=flat)
    assert loss.item() == pytest.approx(0.0123166, abs=5e-8)
    assert torch.equal(grad != 0, base_grad != 0)

    no_tool = golden_inputs(with_tool=False)
    loss2, _, _ = loss_and_grad(no_tool[0], *no_tool[1:], ratio="cumulative", clip=CTPO)
    assert loss2.item() == pytest.approx(0.0105479, abs=5e-8)


def test_golden_grpo() -> None:
    logp, old, adv, mask = golden_inputs()
    terms = per_token_loss(logp, old, adv, mask, ratio="token", clip=GRPO)
    r = [1.030455, 1.010050, 0.818731, 1.173511, 1.349859]
    assert torch.allclose(terms.ratio[0, [0, 1, 3, 4, 5]], torch.tensor(r, dtype=F64), atol=5e-7)
    loss, grad, _ = loss_and_grad(logp, old, adv, mask, ratio="token", clip=GRPO, agg="token-mean")
    assert loss.item() == pytest.approx(0.0149859, abs=5e-8)
    assert grad[0, 5].item() == 0.0  # A=+1 clipped at 1.2
    assert grad[1, 5].item() == pytest.approx(0.1349859, abs=5e-8)  # dual clip 3 not reached
    expected_pos = [-x / 10 for x in r[:4]]
    assert torch.allclose(grad[0, [0, 1, 3, 4]], torch.tensor(expected_pos, dtype=F64), atol=5e-8)


def test_golden_gspo() -> None:
    logp, old, adv, mask = golden_inputs()
    terms = per_token_loss(logp, old, adv, mask, ratio="gspo", clip=GSPO)
    assert torch.allclose(terms.ratio[:, [0, 1, 3, 4, 5]], torch.full((2, 5), math.exp(0.06), dtype=F64))
    assert math.exp(0.06) == pytest.approx(1.0618365, abs=5e-8)
    loss, grad, _ = loss_and_grad(logp, old, adv, mask, ratio="gspo", clip=GSPO, agg="seq-mean-token-mean")
    assert loss.item() == pytest.approx(0.0307183, abs=5e-8)
    assert grad[0].abs().max().item() == 0.0
    expected = torch.tensor([0.1061837, 0.1061837, 0.0, 0.1061837, 0.1061837, 0.1061837], dtype=F64)
    assert torch.allclose(grad[1], expected, atol=5e-8)


# ---------------------------------------------------------------- against the literal reference


CASES = [
    ("cumulative", CTPO),
    ("cumulative", ClipConfig(mode="adaptive", eps_low=0.025, eps_high=0.05, power=0.0, dual=0.05)),
    ("cumulative", ClipConfig(mode="adaptive", eps_low=0.03, eps_high=0.04, power=0.7, dual=None)),
    ("cumulative", ClipConfig(mode="fixed", eps_low=0.5, eps_high=4.0, dual=None)),
    ("cumulative", None),
    ("token", GRPO),
    ("token", ClipConfig(mode="fixed", eps_low=0.1, eps_high=0.3, dual=1.2)),
    ("token", None),
    ("gspo", GSPO),
    ("sequence", ClipConfig(mode="adaptive", eps_low=0.2, eps_high=0.2, power=0.0, dual=math.log(3))),
    ("sequence", None),
]


@pytest.mark.parametrize(("ratio", "clip"), CASES, ids=[f"{r}-{c.mode if c else 'none'}-{i}" for i, (r, c) in enumerate(CASES)])
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_literal_reference(ratio: str, clip: ClipConfig | None, agg: str, seed: int) -> None:
    logp, old, adv, mask = random_batch(seed, per_token_adv=bool(seed % 2))
    w = torch.rand(logp.shape[0], generator=torch.Generator().manual_seed(seed), dtype=F64) + 0.5
    loss, grad, _ = loss_and_grad(logp, old, adv, mask, ratio=ratio, clip=clip, agg=agg, seq_weight=w)
    lp = logp.detach().clone().requires_grad_(True)
    ref = reference_loss(lp, old, adv, mask, ratio, clip, agg, seq_weight=w)
    ref.backward()
    assert loss.item() == pytest.approx(ref.item(), rel=1e-12, abs=1e-14)
    assert torch.allclose(grad, lp.grad, rtol=1e-10, atol=1e-14)


def test_reference_cases_hit_every_region() -> None:
    """The random batches above exercise clipped and unclipped tokens of both signs."""
    seen = torch.zeros(4, dtype=torch.bool)
    for seed in (0, 1):
        logp, old, adv, mask = random_batch(seed, per_token_adv=bool(seed % 2))
        terms = per_token_loss(logp, old, adv, mask, ratio="cumulative", clip=CTPO)
        inside = terms.mask & ~(terms.clip_high | terms.clip_low | terms.clip_dual)
        seen |= torch.stack([terms.clip_high.any(), terms.clip_low.any(), terms.clip_dual.any(), inside.any()])
    assert seen.all(), seen


# ---------------------------------------------------------------- properties of the loss


def test_value_is_exp_cumsum_of_masked_deltas() -> None:
    logp, old, adv, mask = random_batch(3, spread=0.3)
    terms = per_token_loss(logp, old, adv, mask, ratio="cumulative", clip=None)
    expected = torch.where(mask.bool(), torch.exp(torch.cumsum(mask * (logp - old), dim=1)), 0.0)
    assert torch.allclose(terms.ratio, expected, rtol=1e-13, atol=0)
    full = per_token_loss(logp, old, adv, mask, ratio="sequence", clip=None)
    last = torch.exp((mask * (logp - old)).sum(1, keepdim=True)).expand_as(logp)
    assert torch.allclose(full.ratio, torch.where(mask.bool(), last, 0.0), rtol=1e-13, atol=0)


@pytest.mark.parametrize(("ratio", "clip"), [("cumulative", CTPO), ("token", GRPO), ("gspo", GSPO), ("sequence", None)])
def test_masked_token_invariance(ratio: str, clip: ClipConfig | None) -> None:
    """Deleting (or inserting) mask-0 tokens, whatever their values, changes nothing at policy tokens."""
    logp, old, adv, _ = random_batch(5, b=3, t=10, spread=0.2)
    mask = torch.ones(3, 10, dtype=torch.long)
    base = per_token_loss(logp, old, adv, mask, ratio=ratio, clip=clip)
    base_loss, base_grad, _ = loss_and_grad(logp, old, adv, mask, ratio=ratio, clip=clip)
    # insert masked tokens at columns 0, 4, 5 and at the end, holding garbage
    ins = [0, 4, 5, 13]
    cols = [c for c in range(14) if c not in ins]
    big_lp = torch.full((3, 14), float("nan"), dtype=F64)
    big_old = torch.full((3, 14), -1e30, dtype=F64)
    big_lp[:, 4], big_old[:, 5] = float("inf"), float("-inf")
    big_lp[:, cols], big_old[:, cols] = logp, old
    big_mask = torch.zeros(3, 14, dtype=torch.long)
    big_mask[:, cols] = 1
    terms = per_token_loss(big_lp, big_old, adv, big_mask, ratio=ratio, clip=clip)
    assert torch.equal(terms.positions[:, cols], base.positions)
    assert torch.allclose(terms.ratio[:, cols], base.ratio, rtol=1e-14, atol=0)
    assert torch.allclose(terms.loss[:, cols].detach(), base.loss.detach(), rtol=1e-14, atol=0)
    assert torch.equal(terms.clip_high[:, cols], base.clip_high)
    loss, grad, _ = loss_and_grad(big_lp, big_old, adv, big_mask, ratio=ratio, clip=clip)
    assert loss.item() == pytest.approx(base_loss.item(), rel=1e-14)
    assert torch.isfinite(grad).all() and grad[:, ins].abs().max() == 0
    assert torch.allclose(grad[:, cols], base_grad, rtol=1e-13, atol=0)


def _open_gate(rho: float, a: float, t: int, clip: ClipConfig) -> bool:
    """Which tokens pass gradient (docs/algorithms/ctpo.md, "Clipping"), from the window alone (adaptive mode)."""
    s = t**clip.power
    lo, hi, cc = math.exp(-clip.eps_low * s), math.exp(clip.eps_high * s), math.exp(clip.dual * s)
    if a > 0:
        return rho <= hi
    if a < 0:
        return lo <= rho <= cc
    return False


@pytest.mark.parametrize(("ratio", "clip"), [("cumulative", CTPO), ("cumulative", GRPO), ("token", GRPO), ("gspo", GSPO), ("sequence", None)])
def test_jacobian_is_diagonal_brute_force(ratio: str, clip: ClipConfig | None) -> None:
    logp, old, adv, mask = random_batch(7, b=3, t=9, spread=0.12)
    lp = logp.detach().clone().requires_grad_(True)
    terms = per_token_loss(lp, old, adv, mask, ratio=ratio, clip=clip)
    b, t = lp.shape
    for i in range(b):
        for j in range(t):
            (row,) = torch.autograd.grad(terms.loss[i, j], lp, retain_graph=True)
            off = row.clone()
            off[i, j] = 0
            assert off.abs().max().item() == 0.0, (i, j)  # no gradient into earlier (or any other) logp_k
            if not mask[i, j]:
                assert row[i, j].item() == 0.0
                continue
            gated = bool(terms.clip_high[i, j] or terms.clip_low[i, j] or terms.clip_dual[i, j])
            if gated or terms.ratio[i, j] >= math.exp(10):
                assert row[i, j].item() == 0.0
            else:
                expected = -float(adv[i] if adv.dim() == 1 else adv[i, j]) * float(terms.ratio[i, j])
                assert row[i, j].item() == pytest.approx(expected, rel=1e-12)
    # so the loss gradient is -A·ρ_k/N at open tokens
    loss, grad, _ = loss_and_grad(logp, old, adv, mask, ratio=ratio, clip=clip)
    n = mask.sum().item()
    open_ = mask.bool() & ~(terms.clip_high | terms.clip_low | terms.clip_dual)
    expected = torch.where(open_, -adv[:, None] * terms.ratio / n, 0.0)
    assert torch.allclose(grad, expected, rtol=1e-12, atol=1e-16)


@pytest.mark.parametrize("t", [1, 10, 100])
@pytest.mark.parametrize("a", [1.0, -1.0, 0.0])
@pytest.mark.parametrize("region", ["below", "inside", "above", "far above"])
def test_gating_table(t: int, a: float, region: str) -> None:
    lo, hi = (float(x) for x in log_window(t, CTPO))
    target = {"below": 1.5 * lo, "inside": 0.5 * (lo + hi), "above": 1.01 * hi, "far above": 3 * hi}[region]
    old = torch.zeros(1, t + 3, dtype=F64)
    logp = old.clone()
    logp[0, t - 1] = target  # tokens 1..t-1 on-policy, so log ρ_t = target at position t
    mask = torch.ones(1, t + 3)
    _, grad, _ = loss_and_grad(logp, old, torch.tensor([a], dtype=F64), mask, ratio="cumulative", clip=CTPO)
    flows = grad[0, t - 1].item() != 0.0
    assert flows == _open_gate(math.exp(target), a, t, CTPO), (t, a, region)
    # the spec's table, spelled out
    table = {(1.0, "below"): True, (1.0, "inside"): True, (1.0, "above"): False, (1.0, "far above"): False,
             (-1.0, "below"): False, (-1.0, "inside"): True, (-1.0, "above"): False, (-1.0, "far above"): False}
    assert flows == table.get((a, region), False)


def test_cascade_after_prefix_drift() -> None:
    """Once the prefix drifted above the window, a later on-policy token (r_t = 1) gets no A>0 gradient."""
    old = torch.zeros(1, 6, dtype=F64)
    logp = old.clone()
    logp[0, 0] = 0.2  # above [.., 0.05] at t = 1, and above 0.05·√t up to t = 16
    _, grad, _ = loss_and_grad(logp, old, torch.tensor([1.0], dtype=F64), torch.ones(1, 6), ratio="cumulative", clip=CTPO)
    assert grad.abs().max().item() == 0.0
    _, grad, _ = loss_and_grad(logp, old, torch.tensor([1.0], dtype=F64), torch.ones(1, 6), ratio="token", clip=GRPO)
    assert (grad[0, 1:] != 0).all()  # the token ratio does not see the prefix


def test_windows() -> None:
    flat = ClipConfig(mode="adaptive", eps_low=0.025, eps_high=0.05, power=0.0, dual=0.05)
    for t in (1, 2, 10, 100, 1000):
        lo, hi = log_window(t, flat)
        assert math.exp(lo) == pytest.approx(0.97531, abs=5e-6) and math.exp(hi) == pytest.approx(1.05127, abs=5e-6)
    table = {1: (0.9753, 1.0513), 2: (0.9653, 1.0733), 10: (0.9240, 1.1713), 100: (0.7788, 1.6487),
             1000: (0.4536, 4.8605), 4000: (0.2057, 23.62), 8000: (0.1069, 87.54)}
    for t, (lo_r, hi_r) in table.items():
        lo, hi = log_window(t, CTPO)
        assert math.exp(lo) == pytest.approx(lo_r, abs=5e-5)
        assert math.exp(hi) == pytest.approx(hi_r, abs=5e-5 if hi_r < 10 else 5e-3)
    lo, hi = log_window(100, CTPO)
    assert (math.exp(lo), math.exp(hi)) == (pytest.approx(0.77880, abs=5e-6), pytest.approx(1.64872, abs=5e-6))
    lo, hi = log_window(torch.tensor([1, 50]), GRPO)
    assert torch.allclose(lo.exp(), torch.tensor([0.8, 0.8], dtype=F64)) and torch.allclose(hi.exp(), torch.tensor([1.2, 1.2], dtype=F64))


@pytest.mark.parametrize(("t", "clip", "window"), [
    (1, CTPO, (0.97531, 1.05127)),
    (100, CTPO, (0.77880, 1.64872)),
    (100, ClipConfig(mode="adaptive", eps_low=0.025, eps_high=0.05, power=0.0, dual=0.05), (0.97531, 1.05127)),
])
def test_window_edges_probed_through_the_gradient(t: int, clip: ClipConfig, window: tuple[float, float]) -> None:
    """Where the gradient switches on and off, read from the loss itself, matches the window."""
    lo_r, hi_r = window

    def flows(rho: float, a: float) -> bool:
        old = torch.zeros(1, t, dtype=F64)
        logp = old.clone()
        logp[0, t - 1] = math.log(rho)
        _, grad, _ = loss_and_grad(logp, old, torch.tensor([a], dtype=F64), torch.ones(1, t), ratio="cumulative", clip=clip)
        return grad[0, t - 1].item() != 0.0

    assert flows(hi_r * (1 - 1e-5), 1.0) and not flows(hi_r * (1 + 1e-5), 1.0)
    assert flows(lo_r * (1 + 1e-5), -1.0) and not flows(lo_r * (1 - 1e-5), -1.0)
    assert flows(hi_r * (1 - 1e-5), -1.0) and not flows(hi_r * (1 + 1e-5), -1.0)  # dual = upper bound


@pytest.mark.parametrize("per_token_adv", [False, True])
def test_on_policy_equals_grpo(per_token_adv: bool) -> None:
    logp, _, adv, mask = random_batch(9, per_token_adv=per_token_adv)
    old = logp.detach().clone()
    loss_c, grad_c, m_c = loss_and_grad(logp, old, adv, mask, ratio="cumulative", clip=CTPO)
    loss_g, grad_g, m_g = loss_and_grad(logp, old, adv, mask, ratio="token", clip=GRPO)
    terms = per_token_loss(logp, old, adv, mask, ratio="cumulative", clip=CTPO)
    assert torch.equal(terms.ratio, mask.to(F64))
    assert m_c["clip_frac"] == 0.0 and m_g["clip_frac"] == 0.0
    assert m_c["ratio_min"] == m_c["ratio_max"] == 1.0
    a = adv if per_token_adv else adv[:, None]
    expected = -a * mask / mask.sum()
    assert torch.allclose(grad_c, expected, rtol=1e-14, atol=0)
    assert torch.equal(grad_c, grad_g) and loss_c.item() == pytest.approx(loss_g.item(), rel=1e-14)
    for ratio in ("gspo", "sequence"):
        assert torch.equal(loss_and_grad(logp, old, adv, mask, ratio=ratio, clip=GSPO if ratio == "gspo" else None)[1], grad_c)


def test_aggregation_modes() -> None:
    old = torch.zeros(2, 5, dtype=F64)
    logp = old.clone()
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 0, 0, 0, 0]])
    adv = torch.tensor([1.0, 3.0], dtype=F64)  # on-policy: u = -A at every policy token
    tm, _, _ = loss_and_grad(logp, old, adv, mask, ratio="cumulative", clip=CTPO, agg="token-mean")
    sm, _, _ = loss_and_grad(logp, old, adv, mask, ratio="cumulative", clip=CTPO, agg="seq-mean-token-mean")
    ss, _, _ = loss_and_grad(logp, old, adv, mask, ratio="cumulative", clip=CTPO, agg="seq-mean-token-sum")
    assert tm.item() == pytest.approx(-(4 * 1 + 3) / 5)  # Σ u / Σ mask over the whole batch
    assert sm.item() == pytest.approx(-(1 + 3) / 2)
    assert ss.item() == pytest.approx(-(4 + 3) / 2)
    assert tm.item() != pytest.approx(sm.item())


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_global_counts_make_micro_batches_add_up(agg: str) -> None:
    logp, old, adv, mask = random_batch(11, b=6, t=12, spread=0.1)
    full_loss, full_grad, _ = loss_and_grad(logp, old, adv, mask, ratio="cumulative", clip=CTPO, agg=agg)
    kw = ({"global_token_count": int(mask.sum())} if agg == "token-mean"
          else {"global_seq_count": int(mask.any(1).sum())})
    total, grads = 0.0, []
    for sl in (slice(0, 2), slice(2, 6)):
        loss, grad, _ = loss_and_grad(logp[sl], old[sl], adv[sl], mask[sl], ratio="cumulative", clip=CTPO, agg=agg, **kw)
        total += loss.item()
        grads.append(grad)
    assert total == pytest.approx(full_loss.item(), rel=1e-12)
    assert torch.allclose(torch.cat(grads), full_grad, rtol=1e-12, atol=0)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_rows_without_policy_tokens_contribute_nothing(agg: str) -> None:
    logp, old, adv, mask = random_batch(12, b=3, t=8)
    mask[-1] = 1
    base, _, _ = loss_and_grad(logp, old, adv, mask, ratio="cumulative", clip=CTPO, agg=agg)
    pad = lambda x, v: torch.cat([x, torch.full_like(x[:1], v)])  # noqa: E731
    loss, grad, _ = loss_and_grad(pad(logp, 0.0), pad(old, 0.0), pad(adv, 100.0), pad(mask, 0), ratio="cumulative", clip=CTPO, agg=agg)
    assert loss.item() == pytest.approx(base.item(), rel=1e-14)
    assert grad[-1].abs().max() == 0
    empty_loss, empty_grad, m = loss_and_grad(logp, old, adv, torch.zeros_like(mask), ratio="cumulative", clip=CTPO, agg=agg)
    assert empty_loss.item() == 0.0 and empty_grad.abs().max() == 0 and m["tokens"] == 0


def test_positions_skip_masked_tokens_and_restart_per_sequence() -> None:
    mask = torch.tensor([[1, 1, 0, 0, 1, 0, 1], [0, 1, 1, 0, 1, 1, 0]])
    assert positions(mask).tolist() == [[1, 2, 2, 2, 3, 3, 4], [0, 1, 2, 2, 3, 4, 4]]
    old = torch.zeros(2, 7, dtype=F64)
    terms = per_token_loss(old + 0.01, old, torch.ones(2, dtype=F64), mask, ratio="cumulative", clip=CTPO)
    # log ρ_t = 0.01·t at policy tokens: t counts policy tokens only
    t = positions(mask).to(F64)
    assert torch.allclose(terms.log_ratio, torch.where(mask.bool(), 0.01 * t, 0.0), atol=1e-15)
    _, m = policy_loss(old + 0.01, old, torch.ones(2, dtype=F64), mask, ratio="cumulative", clip=CTPO)
    scales = torch.tensor([1, 2, 3, 4, 1, 2, 3, 4], dtype=F64).sqrt()
    assert m["scale_min"] == 1.0 and m["scale_max"] == pytest.approx(2.0)
    assert m["scale_mean"] == pytest.approx(float(scales.mean()))


# ---------------------------------------------------------------- safeguards and dtypes


def test_delta_clamp_affects_values_only_and_log_ratio_is_capped() -> None:
    old = torch.zeros(1, 3, dtype=F64)
    logp = torch.tensor([[-30.0, 0.0, 0.0]], dtype=F64)
    a = torch.tensor([1.0], dtype=F64)
    terms = per_token_loss(logp, old, a, torch.ones(1, 3), ratio="cumulative")
    assert torch.allclose(terms.log_ratio, torch.full((1, 3), -20.0, dtype=F64))  # Δ clamped to -20
    _, grad, _ = loss_and_grad(logp, old, a, torch.ones(1, 3), ratio="cumulative", clip=None)
    assert torch.allclose(grad, torch.full((1, 3), -math.exp(-20) / 3, dtype=F64), rtol=1e-12)  # live term unclamped
    logp = torch.tensor([[8.0, 8.0, 8.0]], dtype=F64)
    terms = per_token_loss(logp, old, a, torch.ones(1, 3), ratio="cumulative")
    assert terms.log_ratio.tolist() == [[8.0, 10.0, 10.0]]  # capped at 10
    _, grad, _ = loss_and_grad(logp, old, a, torch.ones(1, 3), ratio="cumulative", clip=None)
    assert grad[0, 0].item() == pytest.approx(-math.exp(8) / 3) and grad[0, 1:].abs().max() == 0
    # A<0 without a dual clip is bounded by the cap too
    loss, _, _ = loss_and_grad(logp * 3, old, -a, torch.ones(1, 3), ratio="cumulative",
                               clip=ClipConfig(mode="adaptive", dual=None))
    assert math.isfinite(loss.item()) and loss.item() == pytest.approx(math.exp(10), rel=1e-12)


def test_bf16_inputs_are_computed_in_float32() -> None:
    logp, old, adv, mask = random_batch(13, spread=0.1)
    lp16 = logp.to(torch.bfloat16).requires_grad_(True)
    loss, _ = policy_loss(lp16, old.to(torch.bfloat16), adv.to(torch.bfloat16), mask, ratio="cumulative", clip=CTPO)
    assert loss.dtype == torch.float32
    loss.backward()
    assert lp16.grad.dtype == torch.bfloat16
    ref, _ = policy_loss(lp16.detach().float(), old.to(torch.bfloat16).float(), adv.to(torch.bfloat16).float(),
                         mask, ratio="cumulative", clip=CTPO)
    assert loss.item() == pytest.approx(ref.item(), rel=1e-6)


def test_mismatch_weight() -> None:
    old = torch.tensor([[-1.0, -2.0, -1.0], [-1.0, -1.0, -1.0]], dtype=F64)
    rollout = torch.tensor([[-1.5, -2.0, 9.0], [-5.0, -1.0, -1.0]], dtype=F64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    w = mismatch_weight(old, rollout, mask)
    assert w.tolist() == [pytest.approx(math.exp(0.5)), 5.0]  # tool token ignored; truncated at 5
    assert not w.requires_grad
    assert mismatch_weight(old, rollout, mask, cap=1.2).tolist() == [pytest.approx(1.2), pytest.approx(1.2)]
    rollout[0, 1] = float("nan")
    assert finite_rows(mask, mismatch_weight(old, rollout, mask)).tolist() == [False, True]


# ---------------------------------------------------------------- non-finite input


def test_nonfinite_policy_tokens_raise_and_name_the_rows() -> None:
    logp, old, adv, mask = random_batch(14)
    bad = logp.clone()
    bad[1, int(mask[1].nonzero()[0])] = float("nan")
    with pytest.raises(NonFiniteInputError, match=r"logp has NaN/inf at policy tokens of 1 sequence\(s\) \(rows \[1\]\)"):
        policy_loss(bad, old, adv, mask, ratio="cumulative", clip=CTPO)
    bad_old = old.clone()
    bad_old[0, int(mask[0].nonzero()[0])] = float("-inf")
    with pytest.raises(NonFiniteInputError, match="old_logp"):
        policy_loss(logp, bad_old, adv, mask, ratio="token", clip=GRPO)
    bad_adv = adv.clone()
    bad_adv[2] = float("nan")
    with pytest.raises(NonFiniteInputError, match="advantages"):
        policy_loss(logp, old, bad_adv, mask)
    with pytest.raises(NonFiniteInputError, match="seq_weight"):
        policy_loss(logp, old, adv, mask, seq_weight=torch.tensor([1.0, float("inf"), 1.0, 1.0, 1.0], dtype=F64))
    assert issubclass(NonFiniteInputError, ValueError)


def test_finite_rows_then_masking_skips_bad_sequences() -> None:
    logp, old, adv, mask = random_batch(15, b=5)
    bad_lp = logp.clone()
    bad_lp[1, int(mask[1].nonzero()[0])] = float("inf")
    bad_adv = adv.clone()
    bad_adv[2] = float("nan")
    bad_lp[0, -1] = float("nan")  # padding: harmless
    ok = finite_rows(mask, bad_lp, old, bad_adv)
    assert ok.tolist() == [True, False, False, True, True]
    assert int((~ok).sum()) == 2  # the trainer counts these
    loss, grad, _ = loss_and_grad(bad_lp, old, bad_adv, mask * ok[:, None], ratio="cumulative", clip=CTPO)
    keep = ok.nonzero().flatten()
    ref, ref_grad, _ = loss_and_grad(logp[keep], old[keep], adv[keep], mask[keep], ratio="cumulative", clip=CTPO)
    assert loss.item() == pytest.approx(ref.item(), rel=1e-13)
    assert torch.isfinite(grad).all() and torch.allclose(grad[keep], ref_grad, rtol=1e-13, atol=0)


# ---------------------------------------------------------------- invalid arguments


def test_invalid_arguments_name_the_argument_and_allowed_values() -> None:
    logp, old, adv, mask = golden_inputs()
    with pytest.raises(ValueError, match="ratio must be one of 'cumulative', 'token', 'sequence', 'gspo'; got 'prefix'"):
        policy_loss(logp, old, adv, mask, ratio="prefix")
    with pytest.raises(ValueError, match="agg must be one of 'token-mean', 'seq-mean-token-mean', 'seq-mean-token-sum'"):
        policy_loss(logp, old, adv, mask, agg="mean")
    with pytest.raises(ValueError, match="ClipConfig.mode must be one of 'adaptive', 'fixed'"):
        ClipConfig(mode="log")
    with pytest.raises(ValueError, match="old_logp must have the shape of logp"):
        policy_loss(logp, old[:, :5], adv, mask)
    with pytest.raises(ValueError, match="mask must have the shape"):
        policy_loss(logp, old, adv, mask[:1])
    with pytest.raises(ValueError, match="advantages must have shape"):
        policy_loss(logp, old, adv[:1], mask)
    with pytest.raises(ValueError, match="seq_weight must have shape"):
        policy_loss(logp, old, adv, mask, seq_weight=torch.ones(3))
    with pytest.raises(ValueError, match="logp must be a \\[B, T\\] tensor"):
        policy_loss(logp[0], old[0], adv, mask[0])
    with pytest.raises(ValueError, match="clip must be None or a ClipConfig"):
        policy_loss(logp, old, adv, mask, clip={"mode": "fixed"})
    with pytest.raises(ValueError, match="global_token_count applies to agg='token-mean' only"):
        policy_loss(logp, old, adv, mask, agg="seq-mean-token-mean", global_token_count=10)
    with pytest.raises(ValueError, match="ClipConfig.eps_low must be a finite number >= 0"):
        ClipConfig(eps_low=-0.1)
    with pytest.raises(ValueError, match="ClipConfig.dual must be None or a ratio > 1 with mode .fixed."):
        ClipConfig(mode="fixed", eps_low=0.2, eps_high=0.2, dual=0.5)
    with pytest.raises(ValueError, match="ClipConfig.eps_low must be a number in \\[0, 1\\] with mode .fixed."):
        ClipConfig(mode="fixed", eps_low=1.5)


def test_presets_and_no_metrics() -> None:
    assert ClipConfig.ctpo() == CTPO and ClipConfig() == CTPO
    assert ClipConfig.grpo() == ClipConfig(mode="fixed", eps_low=0.2, eps_high=0.2, power=0.0, dual=3.0)
    assert ClipConfig.gspo().dual is None
    logp, old, adv, mask = golden_inputs()
    loss, metrics = policy_loss(logp, old, adv, mask, ratio="cumulative", clip=CTPO, compute_metrics=False)
    assert metrics == {} and loss.item() == pytest.approx(0.0105479, abs=5e-8)


# ---------------------------------------------------------------- metrics


def test_metrics_quantiles_kl_and_types() -> None:
    logp, old, adv, mask = random_batch(16, b=6, t=40, spread=0.2)
    _, m = policy_loss(logp, old, adv, mask, ratio="cumulative", clip=CTPO)
    assert all(isinstance(v, float) for v in m.values())
    sel = mask.bool()
    rho = torch.exp(torch.cumsum(mask * (logp - old), 1))[sel]
    for q in (25, 50, 75, 90, 95, 99):
        assert m[f"ratio_p{q}"] == pytest.approx(float(torch.quantile(rho, q / 100)), rel=1e-12)
    assert m["ratio_min"] == pytest.approx(float(rho.min())) and m["ratio_max"] == pytest.approx(float(rho.max()))
    d = (logp - old)[sel]
    assert m["approx_kl"] == pytest.approx(float((-d).mean()), rel=1e-12)
    assert m["kl_k3"] == pytest.approx(float((d.exp() - 1 - d).mean()), rel=1e-12)
    assert m["clip_frac"] == pytest.approx(m["clip_frac_high"] + m["clip_frac_low"] + m["clip_frac_dual"])
    _, mg = policy_loss(logp, old, adv, mask, ratio="token", clip=GRPO)
    assert "scale_mean" not in mg


@pytest.mark.parametrize(("ratio", "clip"), CASES)
def test_loss_without_metrics_is_identical(ratio: str, clip: ClipConfig | None) -> None:
    """compute_metrics=False reuses buffers in place; loss and gradient must not change."""
    logp, old, adv, mask = random_batch(21)
    old_copy = old.clone()
    a, ga, _ = loss_and_grad(logp, old, adv, mask, ratio=ratio, clip=clip)
    b, gb, m = loss_and_grad(logp, old, adv, mask, ratio=ratio, clip=clip, compute_metrics=False)
    assert m == {} and torch.equal(a, b) and torch.equal(ga, gb)
    assert torch.equal(old, old_copy)  # inputs are never modified


def test_check_finite_off_reads_nothing_and_a_caller_masked_nan_row_stays_out() -> None:
    """A trainer drops non-finite rows on the device (finite_rows) and passes ``check_finite=False``, so the loss
    makes no host read between forward and backward; the masked NaN row then neither raises nor reaches the
    loss, which equals the loss of the clean rows alone."""
    lp = torch.tensor([[-1.0, -2.0], [float("nan"), -0.5], [-0.3, -0.4]], requires_grad=True)
    old = torch.tensor([[-1.1, -1.9], [-0.2, -0.6], [-0.3, -0.5]])
    adv = torch.tensor([1.0, float("nan"), -0.5])
    mask = torch.ones(3, 2)
    ok = finite_rows(mask, lp, old, adv)
    assert ok.tolist() == [True, False, True]
    masked = mask * ok.float().unsqueeze(1)
    lp_in = torch.where(masked > 0, lp, torch.zeros_like(lp))
    old_in = torch.where(masked > 0, old, torch.zeros_like(old))
    with pytest.raises(NonFiniteInputError):  # the default still looks, and names the row
        policy_loss(lp, old, adv, mask, clip=ClipConfig(), fused=False)
    loss, _ = policy_loss(lp_in, old_in, adv, masked, clip=ClipConfig(), fused=False, check_finite=False)
    clean, _ = policy_loss(lp[[0, 2]].detach(), old[[0, 2]], adv[[0, 2]], mask[[0, 2]], clip=ClipConfig(), fused=False)
    assert math.isfinite(float(loss)) and float(loss) == pytest.approx(float(clean), rel=1e-6)
    loss.backward()
    assert torch.isfinite(lp.grad).all() and lp.grad[1].abs().sum() == 0
