"""Recipe E of the MOPD spec: weights, masks, aggregation and the EMA teacher."""

from __future__ import annotations

import math

import pytest
import torch

from tests.training.mopd_tiny import tiny_lm
from toolgym.training.algorithms.distillation.ema import EMATeacher, ema_update
from toolgym.training.algorithms.distillation.loss import (
    distill_divergence,
    is_ratio,
    mopd_loss,
    token_mismatch_weight,
)


def _div(b: int = 3, t: int = 5, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(b, t, generator=g, dtype=torch.float64) + 0.1).requires_grad_(True)


def test_mean_of_per_sequence_token_means_with_different_lengths() -> None:
    d = _div()
    lengths = [5, 2, 3]
    mask = torch.tensor([[1.0] * n + [0.0] * (5 - n) for n in lengths], dtype=torch.float64)
    mask[0, 1] = 0.0  # a tool token inside the first response
    seq = torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64)
    loss, metrics = mopd_loss(d, mask, seq)
    by_hand = []
    for i in range(3):
        vals = [d[i, t].item() for t in range(5) if mask[i, t] == 1]
        by_hand.append(sum(vals) / len(vals))
    assert loss.item() == pytest.approx(sum(by_hand) / 3, abs=1e-12)
    assert metrics["mopd/tokens"] == 9.0
    loss_tm, _ = mopd_loss(d, mask, seq, agg="token-mean")
    assert loss_tm.item() == pytest.approx((d * mask).sum().item() / 9, abs=1e-12)


def test_masked_tokens_and_empty_contexts_get_zero_grad_but_count() -> None:
    d = _div()
    mask = torch.ones(3, 5, dtype=torch.float64)
    mask[0, 3:] = 0.0
    seq = torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64)
    loss, metrics = mopd_loss(d, mask, seq)
    (g,) = torch.autograd.grad(loss, d)
    assert torch.count_nonzero(g[0, 3:]) == 0 and torch.count_nonzero(g[1]) == 0
    assert torch.all(g[0, :3] != 0) and torch.all(g[2] != 0)
    # N_seq counts all three sequences: the per-token gradient of row 2 is 1 / (3 * 5)
    assert g[2, 0].item() == pytest.approx(1 / 15, abs=1e-15)
    assert loss.item() == pytest.approx((d[0, :3].mean() + d[2].mean()).item() / 3, abs=1e-12)
    assert metrics["mopd/trained_frac"] == pytest.approx(2 / 3)
    # garbage at masked positions never leaks into the loss value
    d2 = d.detach().clone()
    d2[1] = float("nan")
    d2[0, 4] = float("inf")
    loss2, _ = mopd_loss(d2, mask, seq)
    assert loss2.item() == pytest.approx(loss.item(), abs=1e-12)


def test_on_policy_ratio_is_one() -> None:
    d = _div()
    logp = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    mask, seq = torch.ones(3, 5, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    loss, metrics = mopd_loss(d, mask, seq, logp=logp, old_logp=logp.detach())
    base, _ = mopd_loss(d, mask, seq)
    assert loss.item() == base.item()
    assert metrics["mopd/ratio_mean"] == 1.0
    assert torch.all(is_ratio(logp, logp.detach()) == 1.0)


def test_off_policy_ratio_capped_and_detached() -> None:
    d = _div()
    logp = torch.tensor([[0.0, -1.0, -2.0, 3.0, 50.0]] * 3, dtype=torch.float64, requires_grad=True)
    old = torch.full((3, 5), -1.0, dtype=torch.float64)
    rho = is_ratio(logp, old)
    expected = [min(math.exp(min(max(v + 1.0, -20), 20)), 2.0) for v in [0.0, -1.0, -2.0, 3.0, 50.0]]
    assert rho[0].tolist() == pytest.approx(expected, rel=1e-12)
    assert rho.max().item() == 2.0 and not rho.requires_grad
    mask, seq = torch.ones(3, 5, dtype=torch.float64), torch.ones(3, dtype=torch.float64)
    loss, metrics = mopd_loss(d, mask, seq, logp=logp, old_logp=old)
    g_logp, g_d = torch.autograd.grad(loss, [logp, d], allow_unused=True)
    assert g_logp is None or torch.count_nonzero(g_logp) == 0  # the ratio carries no gradient
    torch.testing.assert_close(g_d, rho / 15)
    assert metrics["mopd/ratio_capped_frac"] == pytest.approx(3 / 5)  # exp(1), exp(4), exp(51)


def test_token_mismatch_weight_capped_and_detached() -> None:
    trainer = torch.tensor([[-1.0, -0.5, 0.0]], dtype=torch.float64, requires_grad=True)
    rollout = torch.tensor([[-1.0, -1.5, -5.0]], dtype=torch.float64)
    w = token_mismatch_weight(trainer, rollout)
    assert w[0].tolist() == pytest.approx([1.0, 2.0, 2.0])  # exp(0), min(e, 2), min(e^5, 2)
    assert not w.requires_grad
    d = _div(1, 3)
    loss, m = mopd_loss(d, torch.ones(1, 3, dtype=torch.float64), torch.ones(1, dtype=torch.float64),
                        trainer_old_logp=trainer, rollout_logp=rollout)
    assert loss.item() == pytest.approx((d.detach() * w).mean().item(), abs=1e-12)
    assert torch.autograd.grad(loss, trainer, allow_unused=True)[0] is None
    assert m["mopd/token_mismatch_weight_mean"] == pytest.approx(5 / 3)


def test_argument_errors() -> None:
    d = _div()
    with pytest.raises(ValueError):
        mopd_loss(d, torch.ones(3, 5), torch.ones(3), logp=d)
    with pytest.raises(ValueError):
        mopd_loss(d, torch.ones(3, 5), torch.ones(3), agg="sum")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        mopd_loss(d[0], torch.ones(5), torch.ones(1))
    with pytest.raises(ValueError):
        distill_divergence("jsd")


def test_sampled_rkl_option_gradient_is_kl_estimate() -> None:
    logp = torch.tensor([[-1.0, -2.0]], dtype=torch.float64, requires_grad=True)
    tlogp = torch.tensor([[-1.5, -1.0]], dtype=torch.float64)
    d = distill_divergence("sampled_rkl", logp=logp, teacher_logp=tlogp)
    (g,) = torch.autograd.grad(d.sum(), logp)
    assert g.tolist() == [[0.5, -1.0]]  # sg(log p - log q)


def _step(model: torch.nn.Module, seed: int) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(seed)
    ids = torch.randint(0, 100, (2, 6))
    model.train()
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    opt.zero_grad()


def test_ema_update_parameter_by_parameter() -> None:
    student = tiny_lm(vocab_size=100, seed=0)
    ema = EMATeacher(student, rate=0.05)
    phi = {n: p.detach().clone() for n, p in ema.model.named_parameters()}
    assert all(not p.requires_grad for p in ema.model.parameters())
    _step(student, 1)
    theta = dict(student.named_parameters())
    assert ema.update(student, grad_norms=[1.3])
    for n, p in ema.model.named_parameters():
        torch.testing.assert_close(p, 0.95 * phi[n] + 0.05 * theta[n].detach(), rtol=1e-6, atol=1e-6)  # fp32 lerp rounding
    assert any(not torch.equal(p, phi[n]) for n, p in ema.model.named_parameters())


def test_ema_skips_non_finite_and_rate_zero_freezes() -> None:
    student = tiny_lm(vocab_size=100, seed=0)
    ema = EMATeacher(student, rate=0.05)
    before = {n: p.clone() for n, p in ema.model.named_parameters()}
    _step(student, 2)
    assert not ema.update(student, grad_norms=[float("nan"), float("inf")])
    assert not ema.update(student, grad_norms=[])
    assert all(torch.equal(p, before[n]) for n, p in ema.model.named_parameters())
    assert ema.skipped == 2 and ema.updates == 0
    assert ema.update(student, grad_norms=[float("nan"), 0.7])  # one finite step is enough
    frozen = EMATeacher(student, rate=0.0)
    snap = {n: p.clone() for n, p in frozen.model.named_parameters()}
    _step(student, 3)
    frozen.update(student, [1.0])
    assert all(torch.equal(p, snap[n]) for n, p in frozen.model.named_parameters())
    with pytest.raises(ValueError):
        ema_update(frozen.model, student, rate=1.5)
