"""Sampling ahead of the update, with bounded staleness (``rollout.max_staleness: K``).

A thread of the trainer's process drives the rollout workers; the workers sample, run the environments and
score, in processes of their own. Step ``s`` is always sampled with the weights of policy version
``max(0, s - K)`` (version ``v`` = the weights after ``v`` training steps), so while the trainer updates on step
``s`` the workers already sample step ``s + K``, and a run's batches do not depend on which side was faster:
a resumed run regenerates them exactly. The thread waits for a version that is not published yet; the trainer
waits for a batch that is not sampled yet; both waits are measured and logged.

A group whose tokens are older than ``K`` versions when the trainer reaches it (it cannot happen on this
schedule; it guards against a worker that sampled with weights it should not have held) is dropped and
counted, never trained on.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from toolgym.agents.trajectory import Trajectory
from toolgym.errors import ToolgymError


class PipelineError(ToolgymError):
    """The sampling thread failed; the trainer raises its error at the next batch it waits for."""


def group_version(group: list[Trajectory]) -> int | None:
    """The oldest policy version any token of the group was sampled with (None: not recorded)."""
    versions = []
    for t in group:
        token_versions = getattr(t, "token_versions", None)
        if token_versions:
            versions.append(min(token_versions))
        elif "weights_version" in t.metadata:
            versions.append(int(t.metadata["weights_version"]))
    return min(versions) if versions else None


class AheadRollouts:
    """The producer thread and the hand-over of batches. ``owner``: the orchestrator (``sample_step``)."""

    def __init__(self, owner: Any, *, lag: int, first_step: int, last_step: int,
                 pending: dict[int, list[list[Trajectory]]] | None = None) -> None:
        self.owner = owner
        self.lag = lag
        self.last_step = last_step
        self._cond = threading.Condition()
        self._weights: dict[int, dict[str, Any]] = {}
        self._ready: dict[int, tuple[list[list[Trajectory]], int]] = {}
        for s, groups in (pending or {}).items():  # a resume: batches its checkpoint kept
            self._ready[int(s)] = (groups, -1)
        self._next = first_step + len(pending or {})  # the next step the thread samples
        self._floor: int | None = None  # the first version published: no step samples an older one
        self._error: BaseException | None = None
        self._closed = False
        self.sampler_idle_s = 0.0  # waiting for weights
        self._sampler_idle_read = 0.0
        self._thread = threading.Thread(target=self._produce, name="toolgym-rollouts-ahead", daemon=True)
        self._thread.start()

    # -- the trainer's side --------------------------------------------------------------------------------

    def publish(self, version: int, weights: dict[str, Any]) -> None:
        """Policy ``version`` exists (a CPU snapshot): the thread may sample the steps that need it."""
        with self._cond:
            self._weights[version] = weights
            if self._floor is None:
                self._floor = version
            self._cond.notify_all()

    def take(self, step: int) -> tuple[list[list[Trajectory]], dict[str, float]]:
        """The groups of ``step`` (waiting for them if the workers are behind) and the step's pipeline metrics."""
        t0 = time.perf_counter()
        with self._cond:
            while step not in self._ready and self._error is None and not self._closed:
                self._cond.wait(timeout=1.0)
            if step not in self._ready:
                raise PipelineError(f"sampling ahead stopped before step {step + 1}: {self._error!r}") from self._error
            groups, sampled_with = self._ready.pop(step)
            sampler_idle = self.sampler_idle_s - self._sampler_idle_read
            self._sampler_idle_read = self.sampler_idle_s
        kept, dropped, hist = [], 0, {}
        for g in groups:
            v = group_version(g)
            age = step - (v if v is not None else sampled_with)
            if v is not None and age > self.lag:
                dropped += 1
                continue
            hist[age] = hist.get(age, 0) + 1
            kept.append(g)
        m: dict[str, float] = {"trainer_idle_s": time.perf_counter() - t0, "sampler_idle_s": sampler_idle,
                               "groups_dropped_stale": float(dropped)}
        for age in range(self.lag + 1):
            m[f"staleness_{age}"] = float(hist.get(age, 0))
        n = sum(hist.values())
        m["staleness_mean"] = sum(a * c for a, c in hist.items()) / n if n else 0.0
        return kept, m

    def pending(self, next_step: int) -> dict[int, list[dict[str, Any]]]:
        """The batches of steps ``next_step .. next_step + K - 1`` as plain dicts (waiting for any still being
        sampled): with the checkpoint's weights they are all a resumed run needs to continue exactly."""
        want = [s for s in range(next_step, min(next_step + self.lag, self.last_step))]
        with self._cond:
            while any(s not in self._ready for s in want) and self._error is None:
                self._cond.wait(timeout=1.0)
            if self._error is not None and any(s not in self._ready for s in want):
                raise PipelineError(f"sampling ahead failed: {self._error!r}") from self._error
            return {s: [[t.to_dict() for t in g] for g in self._ready[s][0]] for s in want}

    def fail(self, exc: BaseException) -> None:
        """Something the thread depends on failed elsewhere (a weight push to the servers): the trainer raises
        it at its next ``take``."""
        with self._cond:
            self._error = self._error or exc
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=600)

    # -- the thread -----------------------------------------------------------------------------------------

    def _produce(self) -> None:
        try:
            while self._next < self.last_step:
                step = self._next
                t0 = time.perf_counter()
                with self._cond:
                    while self._floor is None and not self._closed:
                        self._cond.wait(timeout=1.0)
                    # a resume whose checkpoint kept no batches samples its first steps with its own weights
                    need = max(self._floor or 0, step - self.lag)
                    while need not in self._weights and not self._closed:
                        self._cond.wait(timeout=1.0)
                    if self._closed:
                        return
                    weights = self._weights[need]
                    for old in [v for v in self._weights if v < need]:  # no later step samples these
                        del self._weights[old]
                    self.sampler_idle_s += time.perf_counter() - t0
                groups = self.owner.sample_step(step, need, weights)
                with self._cond:
                    self._ready[step] = (groups, need)
                    self._next = step + 1
                    self._cond.notify_all()
        except BaseException as exc:  # handed to the trainer at its next take()
            with self._cond:
                self._error = exc
                self._cond.notify_all()


def restore_pending(blob: dict[Any, list[list[dict[str, Any]]]]) -> dict[int, list[list[Trajectory]]]:
    """A checkpoint's pending batches back as trajectories."""
    return {int(s): [[Trajectory.from_dict(t) for t in g] for g in groups] for s, groups in blob.items()}
