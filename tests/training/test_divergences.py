"""Recipe D of the MOPD spec: golden divergence values, gradients, top-K + tail."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.spatial.distance import jensenshannon

from toolgym.training.algorithms.distillation.divergences import (
    add_tail,
    divergence,
    forward_kl,
    full_divergence,
    gather_logprobs,
    jsd,
    renormalize,
    reverse_kl,
    sampled_token_reverse_kl,
    student_topk,
    topk_divergence,
)

ZS = [2.0, 1.0, 0.5, -1.0, -2.0]
ZT = [0.5, 2.0, 0.0, -0.5, -3.0]
P_GOLD = [0.602732, 0.221733, 0.134488, 0.030008, 0.011039]
Q_GOLD = [0.154171, 0.690947, 0.093510, 0.056716, 0.004656]


def _z(requires_grad: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    zs = torch.tensor(ZS, dtype=torch.float64, requires_grad=requires_grad)
    zt = torch.tensor(ZT, dtype=torch.float64)
    return zs, zt


def test_softmax_goldens() -> None:
    zs, zt = _z(False)
    assert torch.softmax(zs, -1).tolist() == pytest.approx(P_GOLD, abs=1e-6)
    assert torch.softmax(zt, -1).tolist() == pytest.approx(Q_GOLD, abs=1e-6)


@pytest.mark.parametrize(
    "alpha,gold",
    [(1.0, 0.609053), (0.0, 0.573229), (0.5, 0.138928), (0.1, 0.050766), (0.25, 0.104283), (0.75, 0.107065),
     (0.9, 0.053109)],
)
def test_full_vocab_goldens(alpha: float, gold: float) -> None:
    zs, zt = _z(False)
    assert full_divergence(zs, zt, alpha).item() == pytest.approx(gold, abs=1e-6)


def test_named_divergences_and_scipy() -> None:
    zs, zt = _z(False)
    lp, lq = torch.log_softmax(zs, -1), torch.log_softmax(zt, -1)
    assert reverse_kl(lp, lq).item() == pytest.approx(0.609053, abs=1e-6)
    assert forward_kl(lp, lq).item() == pytest.approx(0.573229, abs=1e-6)
    ref = jensenshannon(np.exp(lp.numpy()), np.exp(lq.numpy())) ** 2  # natural-log base by default
    assert jsd(lp, lq).item() == pytest.approx(ref, abs=1e-12)
    with pytest.raises(ValueError):
        divergence(lp, lq, 1.5)


@pytest.mark.parametrize(
    "alpha,gold",
    [
        (1.0, [0.454674, -0.387066, -0.033036, -0.037380, 0.002808]),
        (0.0, [0.448561, -0.469215, 0.040978, -0.026708, 0.006384]),
        (0.5, [0.099442, -0.095032, 0.002009, -0.007555, 0.001136]),
    ],
)
def test_full_vocab_gradients(alpha: float, gold: list[float]) -> None:
    zs, zt = _z()
    (g,) = torch.autograd.grad(full_divergence(zs, zt, alpha), zs)
    assert g.tolist() == pytest.approx(gold, abs=1e-6)


def test_gradient_closed_forms() -> None:
    zs, zt = _z()
    p, q = torch.softmax(zs.detach(), -1), torch.softmax(zt, -1)
    kl = (p * (p.log() - q.log())).sum()
    (g_rkl,) = torch.autograd.grad(full_divergence(zs, zt, 1.0), zs)
    torch.testing.assert_close(g_rkl, p * (p.log() - q.log() - kl), rtol=0, atol=1e-14)
    (g_fkl,) = torch.autograd.grad(full_divergence(zs, zt, 0.0), zs)
    torch.testing.assert_close(g_fkl, p - q, rtol=0, atol=1e-14)


TOPK_GOLD = {
    1: ([0], [0.602732, 0.397268], [0.154171, 0.845829], 0.112418, 0.521552, 0.428999),
    2: ([0, 1], [0.602732, 0.221733, 0.175535], [0.154171, 0.690947, 0.154882], 0.134641, 0.591724, 0.555738),
    3: ([0, 1, 2], [0.602732, 0.221733, 0.134488, 0.041048], [0.154171, 0.690947, 0.093510, 0.061372],
        0.137184, 0.602115, 0.565829),
}


@pytest.mark.parametrize("k", [1, 2, 3])
def test_topk_tail_goldens(k: int) -> None:
    ids_gold, sb, tb, g_jsd, g_rkl, g_fkl = TOPK_GOLD[k]
    zs, zt = _z(False)
    lp, ids = student_topk(zs, k)
    lq = gather_logprobs(zt, ids)
    assert ids.tolist() == ids_gold
    assert add_tail(lp).exp().tolist() == pytest.approx(sb, abs=1e-6)
    assert add_tail(lq).exp().tolist() == pytest.approx(tb, abs=1e-6)
    assert topk_divergence(lp, lq, 0.5).item() == pytest.approx(g_jsd, abs=1e-6)
    assert topk_divergence(lp, lq, 1.0).item() == pytest.approx(g_rkl, abs=1e-6)
    assert topk_divergence(lp, lq, 0.0).item() == pytest.approx(g_fkl, abs=1e-6)


def test_topk_k2_gradient_golden() -> None:
    zs, zt = _z()
    lp, ids = student_topk(zs, 2)
    (g,) = torch.autograd.grad(topk_divergence(lp, gather_logprobs(zt, ids), 0.5), zs)
    assert g.tolist() == pytest.approx([0.100740, -0.094555, -0.004739, -0.001057, -0.000389], abs=1e-6)


@pytest.mark.parametrize("alpha", [0.0, 0.25, 0.5, 1.0])
def test_k_equals_v_matches_full(alpha: float) -> None:
    zs, zt = _z(False)
    lp, ids = student_topk(zs, 5)
    tail = add_tail(lp)[-1].exp().item()
    assert tail == pytest.approx(1e-7, rel=1e-3)  # the clamp, not log(0)
    got = topk_divergence(lp, gather_logprobs(zt, ids), alpha).item()
    assert got == pytest.approx(full_divergence(zs, zt, alpha).item(), abs=1e-6)


def test_buckets_sum_to_one_random_batch() -> None:
    g = torch.Generator().manual_seed(0)
    s = torch.randn(3, 7, 50, generator=g, dtype=torch.float64) * 3
    t = torch.randn(3, 7, 50, generator=g, dtype=torch.float64) * 3
    for k in (1, 5, 20, 49):
        lp, ids = student_topk(s, k)
        lq = gather_logprobs(t, ids)
        torch.testing.assert_close(add_tail(lp).exp().sum(-1), torch.ones(3, 7, dtype=torch.float64))
        torch.testing.assert_close(add_tail(lq).exp().sum(-1), torch.ones(3, 7, dtype=torch.float64))
        torch.testing.assert_close(renormalize(lq).exp().sum(-1), torch.ones(3, 7, dtype=torch.float64))


def _central_diff(f, z: torch.Tensor, h: float = 1e-6) -> torch.Tensor:
    out = torch.zeros_like(z)
    for i in range(z.numel()):
        e = torch.zeros_like(z)
        e.view(-1)[i] = h
        out.view(-1)[i] = (f(z + e) - f(z - e)) / (2 * h)
    return out


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.5, 0.9, 1.0])
@pytest.mark.parametrize("k,tail", [(2, True), (3, True), (3, False), (5, True)])
def test_autograd_matches_finite_differences(alpha: float, k: int, tail: bool) -> None:
    zs, zt = _z()
    ids = student_topk(zs, k)[1]  # fixed ids: no gradient through the selection

    def f(z: torch.Tensor) -> torch.Tensor:
        return topk_divergence(gather_logprobs(z, ids), gather_logprobs(zt, ids), alpha, tail=tail)

    (g,) = torch.autograd.grad(f(zs), zs)
    with torch.no_grad():
        fd = _central_diff(f, zs.detach())
    torch.testing.assert_close(g, fd, rtol=0, atol=1e-6)


def test_teacher_gets_no_gradient() -> None:
    zs, _ = _z()
    zt = torch.tensor(ZT, dtype=torch.float64, requires_grad=True)
    for a in (0.0, 0.5, 1.0):
        lp, ids = student_topk(zs, 3)
        loss = topk_divergence(lp, gather_logprobs(zt, ids), a) + full_divergence(zs, zt, a)
        gs, gt = torch.autograd.grad(loss, [zs, zt], allow_unused=True)
        assert gs is not None and gs.abs().sum() > 0
        assert gt is None or torch.count_nonzero(gt) == 0


def test_topk_ids_come_from_the_student() -> None:
    zs, zt = _z(False)
    _, ids = student_topk(zs, 2)
    assert ids.tolist() == [0, 1]  # student's argmax order; the teacher's top-2 would be [1, 0]
    assert torch.topk(zt, 2).indices.tolist() == [1, 0]
    assert not ids.requires_grad


def _rkl_grad_expectation(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    eye = torch.eye(p.numel(), dtype=p.dtype)
    return sum(p[y] * (p[y].log() - q[y].log()) * (eye[y] - p) for y in range(p.numel()))


def test_sampled_token_estimator_expectation_and_monte_carlo() -> None:
    zs, zt = _z()
    p, q = torch.softmax(zs.detach(), -1), torch.softmax(zt, -1)
    analytic = p * (p.log() - q.log() - (p * (p.log() - q.log())).sum())
    exact = _rkl_grad_expectation(p, q)
    torch.testing.assert_close(exact, analytic, rtol=0, atol=1e-15)
    # The surrogate's gradient for one sampled token y is (log p_y - log q_y) * d log p_y / dz.
    lp, lq = torch.log_softmax(zs, -1), torch.log_softmax(zt, -1)
    y = torch.multinomial(p, 200_000, replacement=True, generator=torch.Generator().manual_seed(0))
    (g,) = torch.autograd.grad(sampled_token_reverse_kl(lp[y], lq[y]).mean(), zs)
    torch.testing.assert_close(g, analytic, rtol=0, atol=5e-3)


def test_batched_shapes_and_values_match_single() -> None:
    zs, zt = _z(False)
    s = torch.stack([zs, zs.flip(0)]).unsqueeze(0)  # [1, 2, 5]
    t = torch.stack([zt, zt.flip(0)]).unsqueeze(0)
    lp, ids = student_topk(s, 2)
    d = topk_divergence(lp, gather_logprobs(t, ids), 0.5)
    assert d.shape == (1, 2)
    assert d[0, 0].item() == pytest.approx(0.134641, abs=1e-6)
    assert d[0, 1].item() == pytest.approx(0.134641, abs=1e-6)  # flipping both keeps the pair
    assert math.isfinite(d.sum().item())


def test_half_precision_logits_are_upcast() -> None:
    zs, zt = _z(False)
    lp, ids = student_topk(zs.to(torch.bfloat16), 2)
    lq = gather_logprobs(zt.to(torch.bfloat16), ids)
    assert lp.dtype == torch.float32 and lq.dtype == torch.float32
    assert topk_divergence(lp, lq).item() == pytest.approx(0.134641, abs=5e-3)  # bf16 inputs, fp32 math
