"""Group-relative advantages: GRPO (n-1 std), Dr.GRPO, RLOO; degenerate groups and bad rewards."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from toolgym.training.policy_gradient.advantages import (
    drgrpo_advantages,
    group_advantages,
    grpo_advantages,
    rloo_advantages,
)


def _loop_reference(rewards: list[float], ids: list[str], estimator: str) -> list[float]:
    """Plain-Python transcription of the GRPO, Dr.GRPO and RLOO definitions (docs/algorithms/ctpo.md,
    "Advantages")."""
    out = [0.0] * len(rewards)
    for g in set(ids):
        members = [i for i, x in enumerate(ids) if x == g and math.isfinite(rewards[i])]
        vals = [rewards[i] for i in members]
        if len(vals) < 2 or len(set(vals)) == 1:
            continue
        mean = sum(vals) / len(vals)
        for i in members:
            if estimator == "grpo":
                out[i] = (rewards[i] - mean) / (statistics.stdev(vals) + 1e-6)
            elif estimator == "drgrpo":
                out[i] = rewards[i] - mean
            else:
                others = [rewards[j] for j in members if j != i]
                out[i] = rewards[i] - sum(others) / len(others)
    return out


@pytest.mark.parametrize("estimator", ["grpo", "drgrpo", "rloo"])
def test_matches_loop_reference_with_interleaved_groups(estimator: str) -> None:
    rng = torch.Generator().manual_seed(3)
    rewards = torch.rand(40, generator=rng, dtype=torch.float64).tolist()
    ids = [f"p{int(i)}" for i in torch.randint(0, 6, (40,), generator=rng)]
    adv, stats = group_advantages(rewards, ids, estimator)
    assert adv.shape == (40,)
    assert torch.allclose(adv.double(), torch.tensor(_loop_reference(rewards, ids, estimator), dtype=torch.float64), atol=1e-5)
    assert stats.n_groups == len(set(ids))
    assert stats.n_nonfinite == 0


def test_grpo_uses_unbiased_std_and_eps() -> None:
    adv, _ = grpo_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=torch.float64))
    # mean 0.25; unbiased std = sqrt(0.75/3) = 0.5
    assert adv[0, 0].item() == pytest.approx(0.75 / (0.5 + 1e-6), rel=1e-12)
    assert adv[0, 1].item() == pytest.approx(-0.25 / (0.5 + 1e-6), rel=1e-12)


def test_group_tensor_and_id_list_agree() -> None:
    r = torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.2, 0.9, 0.4, 0.4]])
    a2d, _ = grpo_advantages(r)
    a1d, _ = grpo_advantages(r.reshape(-1), [0] * 4 + [1] * 4)
    assert a2d.shape == (2, 4)
    assert torch.equal(a2d.reshape(-1), a1d)


def test_all_equal_groups_are_zero_and_counted() -> None:
    r = torch.tensor([[0.1] * 8, [1.0] * 8, [0.0, 1.0] * 4])
    for fn in (grpo_advantages, drgrpo_advantages, rloo_advantages):
        adv, stats = fn(r)
        assert torch.equal(adv[:2], torch.zeros(2, 8)), fn.__name__  # exactly zero, not 1e-11
        assert stats.n_zero_groups == 2
        assert adv[2].abs().min() > 0


def test_nonfinite_rewards_skipped_and_counted() -> None:
    rewards = [1.0, float("nan"), 0.0, float("inf"), 1.0, 0.0]
    ids = ["a", "a", "a", "a", "b", "b"]
    adv, stats = grpo_advantages(rewards, ids)
    assert torch.isfinite(adv).all()
    assert stats.n_nonfinite == 2
    assert stats.valid.tolist() == [True, False, True, False, True, True]
    assert adv[1] == 0 and adv[3] == 0
    # group a is computed from its two finite rewards only
    ref = _loop_reference(rewards, ids, "grpo")
    assert torch.allclose(adv, torch.tensor(ref, dtype=torch.float32))
    assert adv[0].item() == pytest.approx(0.5 / (math.sqrt(0.5) + 1e-6), rel=1e-6)


def test_single_valid_member_is_degenerate() -> None:
    adv, stats = rloo_advantages([1.0, float("nan")], ["g", "g"])
    assert adv.tolist() == [0.0, 0.0]
    assert stats.n_zero_groups == 1 and stats.n_nonfinite == 1


def test_rloo_and_drgrpo_relation() -> None:
    r = torch.tensor([[3.0, 1.0, 0.0, 2.0, 5.0]], dtype=torch.float64)
    d, _ = drgrpo_advantages(r)
    lo, _ = rloo_advantages(r)
    assert torch.allclose(lo, d * 5 / 4)
    assert d.sum().abs() < 1e-12


def test_dtype_and_shape_follow_input() -> None:
    adv, _ = grpo_advantages(torch.tensor([[1.0, 0.0]], dtype=torch.float64))
    assert adv.dtype == torch.float64
    adv, _ = grpo_advantages([1, 0, 1], [0, 0, 0])
    assert adv.dtype == torch.float32


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="estimator must be one of 'grpo', 'drgrpo', 'rloo'"):
        group_advantages([1.0, 0.0], [0, 0], "ppo")
    with pytest.raises(ValueError, match="group_ids"):
        group_advantages([1.0, 0.0], [0])
    with pytest.raises(ValueError, match=r"\[num_groups, G\]"):
        group_advantages([1.0, 0.0])
