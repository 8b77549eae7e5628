"""Summaries of a batch of episodes, shared by the update's log line and evaluations."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from toolgym.agents.trajectory import Trajectory
from toolgym.training.algorithms.base import RolloutBatch, scored_rewards


def trajectory_stats(trajs: Sequence[Trajectory]) -> dict[str, Any]:
    """Reward, tool-use rate (episodes with at least one tool call), answer rate, lengths, errors."""
    n = len(trajs)
    if n == 0:
        return {"n": 0, "reward_mean": 0.0, "tool_rate": 0.0, "response_tokens": 0.0, "answered": 0.0,
                "model_tokens": 0, "errors": 0, "infra_failures": 0}
    rewards = [t.reward for t in trajs if math.isfinite(t.reward)]
    tool = sum(1 for t in trajs if any(m.get("role") == "tool" for m in t.turns))
    return {
        "n": n,
        "reward_mean": sum(rewards) / max(len(rewards), 1),
        "tool_rate": tool / n,
        "response_tokens": sum(len(t.response_ids) for t in trajs) / n,
        "answered": sum(1 for t in trajs if t.finish_reason == "answer") / n,
        "model_tokens": sum(t.num_model_tokens for t in trajs),
        "errors": sum(1 for t in trajs if t.finish_reason == "error"),
        "infra_failures": scored_rewards(trajs)[1],
    }


def warn_infra(say: Callable[[str], None], where: str, infra: int, n: int, treated: str) -> None:
    """One line when over 10% of episodes ended in an infrastructure failure or their wall-time limit."""
    if infra * 10 > n:
        say(f"warning: {where}: {infra} of {n} episodes ended in a sandbox, sampler or env failure "
            f"or their wall-time limit ({treated})")


def behaviour_gap(batch: RolloutBatch) -> dict[str, float]:
    """|sampler log-prob - trainer log-prob| over the batch's policy tokens, before any update: 0 up to
    numerics when the engine samples the trainer's policy (a weight push that did not happen shows here).
    Nothing when the objective did not compute the trainer's log-probs (on-policy MOPD with the hf sampler), and
    only the rows it computed them for (the first mini-batch of an exactly on-policy update takes them from the
    update's own forward)."""
    if not batch.old_logp_computed:
        return {}
    diffs = []
    for i, (t, old) in enumerate(zip(batch.trajectories, batch.old_logp, strict=True)):
        if t.loss_mask and t.behavior_logprobs and i not in batch.own_old_rows:
            mask = torch.tensor(t.loss_mask, dtype=torch.bool)
            gap = (torch.tensor(t.behavior_logprobs, dtype=torch.float32) - old.float()).abs()[mask]
            diffs.append(gap[torch.isfinite(gap)])
    if not diffs or not sum(len(d) for d in diffs):
        return {}
    d = torch.cat(diffs)
    return {"behaviour_gap_mean": float(d.mean()), "behaviour_gap_max": float(d.max())}
