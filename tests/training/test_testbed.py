"""Exact-enumeration tabular test bed (docs/algorithms/baselines.md, "How the comparisons are tested").

A tabular softmax policy over a vocabulary of V tokens and a horizon of H tokens, with its own
logits row for every prefix state. Every one of the V^H sequences is enumerated, so each
expectation below is an exact finite sum, not a Monte Carlo estimate.

The estimators' weights are not re-implemented here: each per-trajectory estimator
``g(τ) = Σ_t w_t·adv_t·∇log π_θ(a_t|s_t)`` takes its coefficients ``w_t·adv_t`` from the gradient
of the real ``policy_loss`` (float64, no clip, seq-mean-token-sum) with respect to the per-token
log-probs, so the test bed checks the implementation's stop-gradient ratios themselves.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from toolgym.training.policy_gradient.losses import per_token_loss, policy_loss

RATIOS = ("token", "cumulative", "sequence", "gspo")
ADVS = ("Q", "A", "R")


class Bed:
    """One tabular instance: target logits θ, behaviour logits θ + σ·noise, rewards R(τ)."""

    def __init__(self, v: int, h: int, sigma: float, seed: int, reward: str = "bernoulli",
                 position_only: bool = False, identical_positions: bool = False) -> None:
        g = torch.Generator().manual_seed(seed)
        self.v, self.h = v, h
        self.offsets = [sum(v**j for j in range(k)) for k in range(h + 1)]  # first state id of depth k
        n_states = self.offsets[h]
        if identical_positions:
            theta = torch.randn(1, v, generator=g, dtype=torch.float64).expand(h, v)
            noise = torch.randn(1, v, generator=g, dtype=torch.float64).expand(h, v)
        elif position_only:
            theta = torch.randn(h, v, generator=g, dtype=torch.float64)
            noise = torch.randn(h, v, generator=g, dtype=torch.float64)
        else:
            theta = torch.randn(n_states, v, generator=g, dtype=torch.float64)
            noise = torch.randn(n_states, v, generator=g, dtype=torch.float64)
        if position_only or identical_positions:  # one row per depth, shared by all states at that depth
            depth = torch.tensor([k for k in range(h) for _ in range(v**k)])
            theta, noise = theta[depth], noise[depth]
        self.log_pi = torch.log_softmax(theta, dim=-1)  # target π_θ, [S, V]
        self.log_b = torch.log_softmax(theta + sigma * noise, dim=-1)  # behaviour π_b
        self.seqs = torch.tensor(list(itertools.product(range(v), repeat=h)))  # [N, H], row n = base-v digits of n
        n = self.seqs.shape[0]
        num = torch.arange(n)
        # state of position t (1-indexed): the prefix a_{<t}, of depth t-1
        self.states = torch.stack([self.offsets[t - 1] + num // v ** (h - t + 1) for t in range(1, h + 1)], dim=1)
        self.logp = self.log_pi[self.states, self.seqs]  # [N, H] log π_θ(a_t|s_t)
        self.logp_b = self.log_b[self.states, self.seqs]
        self.p_theta = self.logp.sum(1).exp()
        self.p_b = self.logp_b.sum(1).exp()
        if reward == "bernoulli":
            self.reward = torch.bernoulli(torch.full((n,), 0.5, dtype=torch.float64), generator=g)
        else:
            self.reward = torch.rand(n, generator=g, dtype=torch.float64)
        self._values(num)

    def _values(self, num: torch.Tensor) -> None:
        """Q^{π_θ}(s_t, a_t) and V^{π_θ}(s_t) by backward recursion over prefixes."""
        v, h = self.v, self.h
        vals = [torch.empty(0)] * (h + 1)
        vals[h] = self.reward  # value of each complete sequence
        pi = self.log_pi.exp()
        for k in range(h - 1, -1, -1):
            rows = pi[self.offsets[k] : self.offsets[k] + v**k]  # π(·|prefix) for every prefix of depth k
            vals[k] = (rows * vals[k + 1].reshape(v**k, v)).sum(1)
        self.q = torch.stack([vals[t][num // v ** (h - t)] for t in range(1, h + 1)], dim=1)
        self.vs = torch.stack([vals[t - 1][num // v ** (h - t + 1)] for t in range(1, h + 1)], dim=1)

    def adv(self, kind: str) -> torch.Tensor:
        if kind == "Q":
            return self.q
        if kind == "A":
            return self.q - self.vs
        return self.reward[:, None].expand(-1, self.h)  # terminal reward sampled under π_b

    def moments(self, coef: torch.Tensor, probs: torch.Tensor | None = None) -> tuple[torch.Tensor, float]:
        """E[g] and tr Cov[g] for g(τ) = Σ_t coef[τ,t]·∇_θ log π_θ(a_t|s_t), exactly (default law: π_b).

        The score ∇log π(a_t|s_t) is e_a - π(·|s_t) in the logits row of s_t. States at different
        depths are different rows, so ||g(τ)||² = Σ_t coef²·||e_a - π(·|s_t)||² with no cross terms.
        """
        probs = self.p_b if probs is None else probs
        pi = self.log_pi.exp()
        score = -pi[self.states]  # [N, H, V]
        score.scatter_add_(2, self.seqs.unsqueeze(-1), torch.ones_like(score[..., :1]))
        mean = torch.zeros_like(pi).index_add_(
            0, self.states.reshape(-1), ((probs[:, None] * coef).unsqueeze(-1) * score).reshape(-1, self.v))
        second = (probs[:, None] * coef**2 * (score**2).sum(-1)).sum()
        mean = mean.reshape(-1)
        return mean, float(second - mean @ mean)

    def true_gradient(self) -> torch.Tensor:
        """∇J = Σ_τ P_θ(τ) R(τ) Σ_t ∇log π_θ(a_t|s_t)."""
        return self.moments(self.reward[:, None].expand(-1, self.h), self.p_theta)[0]

    def coefficients(self, ratio: str, adv: torch.Tensor) -> torch.Tensor:
        """w_t·adv_t from the real loss: d(loss)/d(logp) = -w_t·adv_t / N under seq-mean-token-sum."""
        logp = self.logp.clone().requires_grad_(True)
        mask = torch.ones_like(logp)
        loss, _ = policy_loss(logp, self.logp_b, adv, mask, ratio=ratio, clip=None, agg="seq-mean-token-sum")
        (grad,) = torch.autograd.grad(loss, logp)
        return -grad * logp.shape[0]

    def weights(self, ratio: str) -> torch.Tensor:
        return per_token_loss(self.logp, self.logp_b, torch.zeros(len(self.logp), dtype=torch.float64),
                              torch.ones_like(self.logp), ratio=ratio).ratio

    def table(self) -> dict[tuple[str, str], tuple[float, float]]:
        """(adv, ratio) -> (relative bias, tr Cov) as in the spec's illustrative table."""
        true = self.true_gradient()
        out = {}
        for a in ADVS:
            for r in RATIOS:
                mean, cov = self.moments(self.coefficients(r, self.adv(a)))
                out[(a, r)] = (float((mean - true).norm() / true.norm()), cov)
        return out


INSTANCES = [
    dict(v=3, h=5, sigma=0.4, seed=0, reward="bernoulli"),
    dict(v=4, h=4, sigma=0.2, seed=1, reward="uniform"),
    dict(v=3, h=6, sigma=0.5, seed=2, reward="uniform"),
]


@pytest.fixture(scope="module", params=INSTANCES, ids=lambda p: f"V{p['v']}H{p['h']}s{p['sigma']}")
def bed(request: pytest.FixtureRequest) -> Bed:
    return Bed(**request.param)


def test_enumeration_is_a_distribution(bed: Bed) -> None:
    assert abs(float(bed.p_theta.sum()) - 1) < 1e-12 and abs(float(bed.p_b.sum()) - 1) < 1e-12
    # sanity of Q: the Q-form of the policy gradient under π_θ equals the REINFORCE form
    qform, _ = bed.moments(bed.q, bed.p_theta)
    assert torch.allclose(qform, bed.true_gradient(), atol=1e-12)


def test_cumulative_ratio_has_unit_mean_at_every_position(bed: Bed) -> None:
    rho = bed.weights("cumulative")
    expected = (bed.logp - bed.logp_b).cumsum(1).exp()
    assert torch.allclose(rho, expected, rtol=1e-13, atol=0)
    means = (bed.p_b[:, None] * rho).sum(0)
    assert torch.allclose(means, torch.ones(bed.h, dtype=torch.float64), atol=1e-12)


def test_bias_pattern_of_the_expected_outcome_table(bed: Bed) -> None:
    tab = bed.table()
    for a in ("Q", "A"):  # prefix advantages of π_θ: cumulative and full IS are exactly unbiased
        assert tab[(a, "cumulative")][0] < 1e-10, (a, tab)
        assert tab[(a, "sequence")][0] < 1e-10, (a, tab)
        assert tab[(a, "token")][0] > 1e-3, (a, tab)  # GRPO: wrong state distribution
        assert tab[(a, "gspo")][0] > 1e-3, (a, tab)  # not an IS identity
    # terminal reward sampled under π_b: only the full ratio is unbiased
    # (docs/algorithms/ctpo.md, "Where toolgym differs from the paper")
    assert tab[("R", "sequence")][0] < 1e-10, tab
    assert tab[("R", "cumulative")][0] > 1e-3, tab
    assert tab[("R", "token")][0] > 1e-3, tab
    assert tab[("R", "gspo")][0] > 1e-3, tab


def test_on_policy_every_estimator_is_reinforce() -> None:
    bed = Bed(v=3, h=5, sigma=0.0, seed=4)
    true = bed.true_gradient()
    for a in ADVS:
        adv = bed.adv(a)
        for r in RATIOS:
            coef = bed.coefficients(r, adv)
            # the scores at different positions are linearly independent (different states), so
            # equal coefficients are equal estimators g(τ) for every τ: REINFORCE's, weight 1
            assert torch.allclose(coef, adv, rtol=1e-14, atol=1e-15), (a, r)
            mean, _ = bed.moments(coef)
            assert float((mean - true).norm() / true.norm()) < 1e-10, (a, r)


def test_cumulative_ratio_variance_grows_and_stays_below_full(bed: Bed) -> None:
    rho = bed.weights("cumulative")
    full = bed.weights("sequence")
    assert torch.allclose(full, rho[:, -1:].expand_as(full), rtol=1e-13, atol=0)
    var = (bed.p_b[:, None] * (rho - 1) ** 2).sum(0)
    var_full = float((bed.p_b * (full[:, 0] - 1) ** 2).sum())
    assert (var[1:] >= var[:-1] - 1e-14).all(), var
    assert (var <= var_full + 1e-14).all()
    assert var[0] < var_full  # strict while the suffix is off-policy


def test_per_term_covariance_prefix_vs_full(bed: Bed) -> None:
    """Guaranteed ordering (Prop. 2): tr Cov(ρ_t f) ≤ tr Cov(ρ_full f) for prefix-measurable f."""
    rho = bed.weights("cumulative")
    full = bed.weights("sequence")
    adv = bed.adv("A")
    for t in range(bed.h):
        one = torch.zeros_like(adv)
        one[:, t] = adv[:, t]
        _, cov_prefix = bed.moments(one * rho)
        _, cov_full = bed.moments(one * full)
        assert cov_prefix <= cov_full + 1e-12, t


def _chi2(bed: Bed) -> torch.Tensor:
    """χ²_k = Σ_a π_θ²/π_b - 1 at each depth (position-only policies: one row per depth)."""
    rows = torch.tensor(bed.offsets[: bed.h])
    return (bed.log_pi[rows].exp() ** 2 / bed.log_b[rows].exp()).sum(1) - 1


def test_independence_product_formula() -> None:
    bed = Bed(v=4, h=5, sigma=0.5, seed=5, position_only=True)
    var = (bed.p_b[:, None] * (bed.weights("cumulative") - 1) ** 2).sum(0)
    expected = torch.cumprod(1 + _chi2(bed), 0) - 1
    assert torch.allclose(var, expected, rtol=1e-11, atol=0)


@pytest.mark.parametrize("sigma", [0.3, 1e-3])
def test_identical_positions_ratio_tends_to_h_over_t(sigma: float) -> None:
    h = 6
    bed = Bed(v=3, h=h, sigma=sigma, seed=6, identical_positions=True)
    rho = bed.weights("cumulative")
    var = (bed.p_b[:, None] * (rho - 1) ** 2).sum(0)
    delta = float(_chi2(bed)[0])
    t = torch.arange(1, h + 1, dtype=torch.float64)
    closed = ((1 + delta) ** h - 1) / ((1 + delta) ** t - 1)
    assert torch.allclose(var[-1] / var, closed, rtol=1e-6)
    if sigma < 0.01:
        assert torch.allclose(var[-1] / var, h / t, rtol=1e-4)
    else:
        assert (var[-1] / var[:-1] > h / t[:-1]).all()  # off-policy: grows beyond H/t


def test_illustrative_instance_zero_nonzero_pattern() -> None:
    """The spec's V=3, H=5, σ=0.4 Bernoulli instance: only the pattern is asserted, not magnitudes."""
    tab = Bed(v=3, h=5, sigma=0.4, seed=11).table()
    zero = {("Q", "cumulative"), ("Q", "sequence"), ("A", "cumulative"), ("A", "sequence"), ("R", "sequence")}
    for key, (bias, cov) in tab.items():
        assert (bias < 1e-10) == (key in zero), (key, bias)
        assert cov > 0


def test_moments_match_dense_brute_force() -> None:
    """The no-cross-term shortcut in Bed.moments against dense per-trajectory gradient vectors."""
    bed = Bed(v=2, h=3, sigma=0.5, seed=12)
    coef = bed.coefficients("cumulative", bed.adv("R"))
    pi = bed.log_pi.exp()
    dense = torch.zeros(len(coef), *pi.shape, dtype=torch.float64)
    for n in range(len(coef)):
        for t in range(bed.h):
            s, a = int(bed.states[n, t]), int(bed.seqs[n, t])
            dense[n, s] += coef[n, t] * (torch.nn.functional.one_hot(torch.tensor(a), bed.v) - pi[s])
    dense = dense.reshape(len(coef), -1)
    mean = (bed.p_b[:, None] * dense).sum(0)
    cov = float((bed.p_b * (dense**2).sum(1)).sum() - mean @ mean)
    m2, c2 = bed.moments(coef)
    assert torch.allclose(m2, mean, atol=1e-14)
    assert abs(c2 - cov) < 1e-12
