"""Several environments in one run (``rollout.envs``): which environment each prompt slot of a step draws, where
each environment's own task order stands, and the per-environment numbers of a step or an evaluation.

The draw of step ``s`` depends only on (seed, step, weights, prompts per step), never on what ran before in this
process, and each environment's cursor (how many of its tasks earlier steps took) is the sum of the draws of the
steps before ``s``: a resumed run therefore takes the same tasks as an uninterrupted one.

Why quotas rather than independent draws: with few prompts per step, drawing each slot on its own often gives
one environment the whole step (two slots at 50/50: half the steps). Here each environment gets
``floor(P * w)`` or one more slot, the extra slots chosen at random with the right probabilities (systematic
sampling of the fractional parts, in exact rational arithmetic), so every step is close to the mixture and the
expected count is exactly ``P * w``. Torch-free.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Sequence
from fractions import Fraction
from typing import Any


def draw(weights: Sequence[float], slots: int, seed: int, step: int) -> list[int]:
    """The environment (an index into ``weights``) of each of a step's ``slots`` prompt slots, in a seeded
    random order: environment ``e`` gets ``floor(slots * w_e)`` or one more, ``w_e = weights[e] / sum``, with
    expected count exactly ``slots * w_e``."""
    if not weights or any(not (w > 0 and math.isfinite(w)) for w in weights):
        raise ValueError(f"weights must be finite numbers > 0; got {list(weights)}")
    total = sum(Fraction(w) for w in weights)
    shares = [slots * Fraction(w) / total for w in weights]
    counts = [math.floor(s) for s in shares]
    rng = random.Random(f"mixture:{seed}:{step}")
    rest = slots - sum(counts)
    if rest:
        # points u, u+1, ..., u+rest-1 on the fractional parts laid end to end (total length = rest): each part is
        # shorter than 1, so it holds at most one point, and holds one with probability equal to its length
        u = Fraction(rng.random())
        edge, k = Fraction(0), 0
        for e, (s, c) in enumerate(zip(shares, counts, strict=True)):
            edge += s - c
            if k < rest and u + k < edge:
                counts[e] += 1
                k += 1
    order = [e for e, c in enumerate(counts) for _ in range(c)]
    rng.shuffle(order)
    return order


class Mixture:
    """The draws of a run, and each environment's cursor before a step (memoised: computing step ``s`` replays
    the draws of the steps before it once)."""

    def __init__(self, weights: Sequence[float], slots: int, seed: int) -> None:
        self.weights = list(weights)
        self.slots = slots
        self.seed = seed
        self._before: list[list[int]] = [[0] * len(self.weights)]  # [s]: each env's tasks taken by steps < s
        self._lock = threading.Lock()  # the pipeline's thread plans steps too

    def draw(self, step: int) -> list[int]:
        return draw(self.weights, self.slots, self.seed, step)

    def cursors(self, step: int) -> list[int]:
        """How many tasks of each environment the steps before ``step`` drew."""
        with self._lock:
            while len(self._before) <= step:
                s = len(self._before) - 1
                counts = list(self._before[s])
                for e in self.draw(s):
                    counts[e] += 1
                self._before.append(counts)
            return list(self._before[step])

    def plan(self, step: int) -> list[tuple[int, int]]:
        """(environment, its cursor position) of each slot of ``step``, in slot order."""
        at = self.cursors(step)
        out = []
        for e in self.draw(step):
            out.append((e, at[e]))
            at[e] += 1
        return out


class TaskOrder:
    """One environment's task order: its stream in order (an unbounded source, ``size`` 0) or a seeded
    permutation per epoch, so every task comes once before any comes twice."""

    def __init__(self, size: int, key: str) -> None:
        self.size = size
        self.key = key  # with the epoch, seeds the permutation
        self._perm: tuple[int, list[int]] | None = None

    def index(self, position: int) -> int:
        if not self.size:
            return position
        epoch, pos = divmod(position, self.size)
        if self._perm is None or self._perm[0] != epoch:
            perm = list(range(self.size))
            random.Random(f"{self.key}:{epoch}").shuffle(perm)
            self._perm = (epoch, perm)
        return self._perm[1][pos]


def env_metrics(per_rank: Sequence[dict[str, dict[str, Any]]], names: Sequence[str]) -> dict[str, float]:
    """``episodes/NAME``, and where it is > 0 ``reward_mean/NAME`` and ``tool_rate/NAME``, from each process's
    ``{name: trajectory_stats(...)}``."""
    out: dict[str, float] = {}
    for name in names:
        stats = [r[name] for r in per_rank if name in r]
        n = sum(s["n"] for s in stats)
        out[f"episodes/{name}"] = n
        if n:
            for key in ("reward_mean", "tool_rate"):
                out[f"{key}/{name}"] = sum(s[key] * s["n"] for s in stats) / n
    return out
