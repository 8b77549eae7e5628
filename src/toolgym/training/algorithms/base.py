"""What an algorithm implements (:class:`Objective`) and what it is given (:class:`StepContext`).

The trainer owns sampling, optimisation, scheduling and checkpoints; an objective owns one step's
preparation (advantages, teacher prompts, old log-probs it needs) and the loss of a micro-batch. It
sees the trainer through a small context, never the trainer itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from toolgym.agents.trajectory import Trajectory
    from toolgym.training.config_schema import TrainConfig
    from toolgym.training.update.batch import TokenBatch
    from toolgym.training.update.data_parallel import DistInfo


#: episodes that ended for a reason no program could have caused (an exception: a sampler failure, an
#: InfrastructureError such as a sandbox fault that a control run saw too, a bug; or a sampling call over its
#: limit; or "worker_timeout": the group's episode worker ran past ``rollout.group_deadline_s`` and was killed, a
#: hung reward function or parser that stalled every episode of the process): their reward says nothing about
#: the policy, so they do not train and are never anyone's peer
#: (counted as ``infra_failures``). A program's own failures are scored, at 0: its sandbox failing under it,
#: and an episode over its own environment time ("time_limit"). See docs/threat-model.md.
INFRA_FAILURES = ("error", "timeout", "worker_timeout")


def scored_rewards(trajectories: Sequence[Trajectory]) -> tuple[list[float], int]:
    """Rewards with NaN for infrastructure failures (excluded from baselines, training and peer choice),
    and how many there were."""
    out, bad = [], 0
    for t in trajectories:
        if t.finish_reason in INFRA_FAILURES:
            out.append(float("nan"))
            bad += 1
        else:
            out.append(float(t.reward))
    return out, bad


@dataclass
class RolloutBatch:
    """One step's trajectories with everything computed once per rollout batch."""

    trajectories: list[Trajectory]
    group_index: list[int]  # prompt group of each trajectory (mini-batches cut along groups)
    advantages: torch.Tensor  # [N]
    old_logp: list[torch.Tensor]  # per trajectory, [T_i] trainer log-probs before any update
    seq_weight: torch.Tensor | None  # [N] optional mismatch weight
    keep: torch.Tensor  # [N] bool: rows that train (finite rewards, log-probs, weights)
    extra: dict[str, Any] = field(default_factory=dict)
    old_logp_computed: bool = True  # False: old_logp are zero placeholders (an objective that never reads them)
    #: rows whose old log-probs are the update's own, detached (exactly on-policy: first mini-batch of the first
    #: epoch, sampled by the current weights, no mismatch weight); their ``old_logp`` entries are placeholders
    own_old_rows: frozenset[int] = frozenset()


@dataclass
class StepContext:
    """The trainer's state an objective may use. ``model`` is the module as wrapped for training (DDP);
    ``module`` the bare one (for copies, e.g. an EMA teacher). ``grad_norms``: the last update's."""

    cfg: TrainConfig
    model: Any
    module: Any
    tokenizer: Any
    pad_id: int
    device: str
    out_dir: Path
    dist: DistInfo
    temperature: float  # the rollouts' sampling temperature: log-probs are of softmax(logits / T)
    collate: Callable[[Sequence[Trajectory]], TokenBatch]
    old_logprobs: Callable[[Sequence[Trajectory]], list[torch.Tensor]]
    autocast: Callable[[], AbstractContextManager[Any]]
    grad_norms: list[float] = field(default_factory=list)
    separate_sampler: bool = False  # rollouts come from other weights than ``module`` (PolicySync.samples_elsewhere)
    share_prompt: bool = False  # one prompt forward per group (model.share_prompt, where the run allows it)


class Objective:
    """An algorithm's loss. ``prepare`` and ``loss`` are required; the other hooks are optional no-ops."""

    def prepare(self, ctx: StepContext, groups: list[list[Trajectory]]) -> tuple[RolloutBatch, dict[str, float]]:
        """Once per step, before any update: the batch every mini-batch slices, and metrics."""
        raise NotImplementedError

    def loss(self, ctx: StepContext, batch: RolloutBatch, rows: list[int], token_count: float,
             seq_count: float) -> tuple[torch.Tensor, dict[str, Any]]:
        """The loss of one micro-batch (``rows`` of ``batch``); counts are the mini-batch's global normalisers.

        Metrics are numbers or 0-dim tensors on the loss's device; the trainer weights them by ``tokens`` and
        reads the tensors from the device once per step. ``rows_skipped_nonfinite`` counts rows left out."""
        raise NotImplementedError

    def after_update(self, ctx: StepContext) -> dict[str, float]:
        """Once per step after its optimizer steps (e.g. move an EMA teacher); returns metrics."""
        return {}

    def state_dict(self) -> dict[str, Any] | None:
        """What a checkpoint must keep for an exact resume (None: nothing)."""
        return None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        return None
