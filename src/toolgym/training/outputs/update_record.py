"""What one step's update did to each rollout, kept for the step's saved rollouts (`logging.save_rollouts`):
the advantage a row trained with, and which of its response tokens the trust-region clip cut.

Why here and not recomputed later: whether a token is clipped depends on the policy's log-probs at the
moment of each update pass (after the earlier mini-batches moved the weights), which no later pass can see.
The policy-gradient loss records them as it goes, with the rule the loss itself uses
(`losses.per_token_loss`); only when rollouts are saved, at the cost of one extra elementwise pass per
micro-batch and a few small device-to-host copies.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from toolgym.agents.trajectory import Trajectory

CLIP_KINDS = ("high", "low", "dual")


class UpdateRecord:
    """Per trajectory of one step: advantage, update passes, and the clipped response positions by kind
    (high: A > 0 and the ratio above the window; low: A < 0 and below it; dual: A < 0 and the dual clip)."""

    def __init__(self) -> None:
        self._row_of: dict[int, int] = {}
        self._advantage: dict[int, float | None] = {}
        self._passes: dict[int, int] = {}
        self._trained: dict[int, bool] = {}
        self._clip: dict[int, dict[str, set[int]]] = {}

    def attach(self, trajectories: Sequence[Trajectory]) -> None:
        """The batch's trajectories, whose positions `record` receives as rows."""
        self._row_of = {id(t): i for i, t in enumerate(trajectories)}

    def record(self, rows: Sequence[int], advantages: torch.Tensor, mask: torch.Tensor, high: torch.Tensor,
               low: torch.Tensor, dual: torch.Tensor) -> None:
        """One micro-batch of one update pass: `advantages` [B], the loss mask and clip flags [B, T]."""
        adv = advantages.detach().to("cpu", torch.float64).tolist()
        trained = (mask.detach() != 0).any(dim=-1).cpu().tolist()
        flags = [f.detach().cpu() for f in (high, low, dual)]
        for b, row in enumerate(rows):
            self._passes[row] = self._passes.get(row, 0) + 1
            self._trained[row] = self._trained.get(row, False) or bool(trained[b])
            self._advantage[row] = adv[b] if math.isfinite(adv[b]) else None
            kinds = self._clip.setdefault(row, {k: set() for k in CLIP_KINDS})
            for name, f in zip(CLIP_KINDS, flags, strict=True):
                kinds[name].update(f[b].nonzero().flatten().tolist())

    def for_trajectory(self, t: Trajectory) -> dict[str, Any] | None:
        """What to store in the trajectory's `metadata["train"]` (None: the loss never saw it)."""
        row = self._row_of.get(id(t))
        if row is None or row not in self._passes:
            return None
        return {"advantage": self._advantage[row], "passes": self._passes[row], "trained": self._trained[row],
                "clip": {k: sorted(v) for k, v in self._clip[row].items()}}
