"""RayRolloutPool: the driver that schedules rollout groups over rollout-worker actors.

Unit of work: one prompt's group (``group_size`` episodes), a :class:`GroupJob` keyed by
(step, task index). The driver

- keeps at most ``max_in_flight`` groups submitted per worker (back-pressure: a slow or busy worker
  is not buried under the whole step while another idles; the rest wait in the driver's queue),
- returns the groups in job order, whatever order they finish in,
- pushes weights once per version into the object store (``ray.put``); every replica loads the same
  object, and every group carries the version it must be sampled with, so a stale replica refuses it,
- when a worker dies (``RayActorError``: killed, OOM, node lost) puts its unfinished groups back at the
  front of the queue, where live workers take them, and starts a replacement with the current weights,
- accepts each key once: a result for a key that is already in is counted and dropped.

With ``servers`` (inference servers that Ray actors started, :mod:`.ray_servers`) the workers hold no model:
each is placed on the node of a server and samples from the servers of its node on loopback
(:mod:`.server_clients`); weights go to the servers, and :meth:`RayRolloutPool.label_version` tells the workers
which version the servers hold.

Seeds: a group runs ``RolloutRunner.run_episode(spec, task_index, g)`` with the runner seed and the
global task index of the single-process run, so where a group runs (and how often) changes nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolgym.errors import ToolgymError


class RolloutPoolError(ToolgymError):
    """A group failed in a way a retry cannot fix (an error inside the worker, or too many deaths)."""


@dataclass
class GroupJob:
    """One prompt's group. ``env``: a registered env id, or a callable ``env(**env_kwargs, sandbox=...)``."""

    key: tuple[int, int]  # (step, task index): the dedupe key
    task_index: int  # the index the single-process runner would give this task (seeds depend on it)
    spec: Any  # agents.runner.TaskSpec
    group_size: int
    env: str | Callable[..., Any]
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    params: Any = None  # agents.sampling.SamplingParams
    limits: Any = None  # agents.runner.EpisodeLimits
    seed: int = 0  # the runner seed of the step
    attempts: int = 0


@dataclass
class PoolStats:
    submitted: int = 0
    completed: int = 0
    resubmitted: int = 0
    worker_deaths: int = 0
    replacements: int = 0
    duplicates_dropped: int = 0
    stale_refusals: int = 0
    weight_pushes: int = 0
    deadline_kills: int = 0  # workers killed because a group ran past group_deadline_s (local pool)
    groups_failed: int = 0  # groups returned as failed episodes (finish_reason "worker_timeout")


def gpu_share(cluster_gpus: float, num_workers: int) -> float:
    """Each worker's GPU request: an equal share of the cluster's GPUs, at most a whole one (0 without GPUs)."""
    return min(1.0, cluster_gpus / num_workers) if cluster_gpus > 0 else 0.0


@dataclass
class _Slot:
    actor: Any
    generation: int = 0
    inflight: int = 0
    alive: bool = True


class RayRolloutPool:
    """``num_workers`` rollout workers on a Ray cluster (:func:`.cluster.connect` first; without it a
    loopback-only local cluster is started). ``weights``: the initial policy under the plain transformers
    model's own names (default ``model.state_dict()``; a LoRA or FSDP model passes its merged, gathered weights,
    as :meth:`push_weights` does)."""

    def __init__(self, model: Any, tokenizer: Any, *, num_workers: int = 2, cpus_per_worker: float = 1.0,
                 sandbox: str | None = "auto", sandbox_pool: int = 1, max_in_flight: int = 2,
                 max_replacements: int = 8, max_attempts: int = 4, sampler_kwargs: dict[str, Any] | None = None,
                 tool_parser: str | None = None, weights: dict[str, Any] | None = None,
                 gpus_per_worker: float | None = None, servers: list[dict[str, Any]] | None = None) -> None:
        """``gpus_per_worker``: the GPU share each worker asks Ray for (its sampler then runs there); None: an
        equal share of the cluster's GPUs, at most one each, or none on a CPU-only cluster. ``servers``: what
        each server actor describes (``ServerActor.describe``): the workers sample from those (``model``
        may then be None)."""
        import ray

        from toolgym.distributed.worker import RolloutWorker

        if num_workers < 1 or max_in_flight < 1:
            raise RolloutPoolError("num_workers and max_in_flight must be >= 1")
        if not ray.is_initialized():  # not ray's implicit init: that one advertises the outward address
            from toolgym.distributed.cluster import connect

            connect()
        self._ray = ray
        self.num_workers, self.max_in_flight = num_workers, max_in_flight
        self.max_replacements, self.max_attempts = max_replacements, max_attempts
        self.stats = PoolStats()
        self.servers = servers
        self._config = None if servers else model.config
        self._tokenizer_ref = ray.put(tokenizer)
        self.version = 0
        # the workers rebuild a plain transformers model from the config: they need its own names and full tensors
        self._weights_ref = None if servers else ray.put(_cpu_state(model) if weights is None else _cpu(weights))
        self._worker_kw = {"sandbox": sandbox, "sandbox_pool": sandbox_pool, "threads": max(1, int(cpus_per_worker)),
                           "sampler_kwargs": dict(sampler_kwargs or {}), "tool_parser": tool_parser}
        if servers:  # a client samples on its node's servers: no GPU of its own
            gpus_per_worker = 0.0
        if gpus_per_worker is None:
            gpus_per_worker = gpu_share(float(ray.cluster_resources().get("GPU", 0)), num_workers)
        self.gpus_per_worker = gpus_per_worker
        self._actor_cls = ray.remote(num_cpus=cpus_per_worker, num_gpus=gpus_per_worker,
                                     max_restarts=0)(RolloutWorker)
        self.slots = [_Slot(self._spawn(i)) for i in range(num_workers)]
        self._start()

    # -- public -------------------------------------------------------------------------------------------

    @property
    def workers(self) -> list[Any]:
        """The current actor handles, one per slot (a replaced worker's slot gets the new handle)."""
        return [s.actor for s in self.slots]

    def inflight(self) -> list[int]:
        """Groups submitted and not yet returned, per slot."""
        return [s.inflight for s in self.slots]

    def wait_ready(self) -> list[dict[str, Any]]:
        """Block until every worker is constructed (model loaded, sandbox pool warm)."""
        return self._ray.get([s.actor.info.remote() for s in self.slots])

    def worker_info(self) -> list[dict[str, Any] | None]:
        """Each live worker's slot, pid, weight version, groups done and busy seconds (None: unreachable)."""
        out: list[dict[str, Any] | None] = []
        for s in self.slots:
            try:
                out.append(self._ray.get(s.actor.info.remote(), timeout=30) if s.alive else None)
            except Exception:
                out.append(None)
        return out

    def push_weights(self, state_dict: dict[str, Any]) -> int:
        """Put the weights in the object store once; every replica loads that object. Returns the version.

        ``state_dict``: the full policy under the plain transformers model's names (no peft names, no shards)."""
        ray = self._ray
        if self.servers:
            raise RolloutPoolError("these workers sample from servers: weights go to the servers, versions here "
                                   "through label_version")
        self.version += 1
        self._weights_ref = ray.put(_cpu(state_dict))
        self.stats.weight_pushes += 1
        acks = {i: s.actor.load_weights.remote(self.version, self._weights_ref)
                for i, s in enumerate(self.slots) if s.alive}
        for i, ref in acks.items():
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError:
                self._replace(i)  # the replacement is built from the new weights
        return self.version

    def label_version(self, version: int) -> int:
        """Workers that sample from servers: the servers hold policy ``version`` from now on; groups are sent
        for it (a worker still on another label refuses one and is resynced, as after a push)."""
        ray = self._ray
        self.version = int(version)
        acks = {i: s.actor.load_weights.remote(self.version, None) for i, s in enumerate(self.slots) if s.alive}
        for i, ref in acks.items():
            try:
                ray.get(ref)
            except ray.exceptions.RayActorError:
                self._replace(i)
        return self.version

    def run(self, jobs: Sequence[GroupJob], on_result: Callable[[GroupJob, list[Any]], None] | None = None
            ) -> list[list[Any]]:
        """Run every job once; return the groups in job order. ``on_result`` sees each accepted group."""
        ray = self._ray
        keys = [j.key for j in jobs]
        if len(set(keys)) != len(keys):
            raise RolloutPoolError("two jobs share a (step, task index) key")
        queue: deque[GroupJob] = deque(jobs)
        results: dict[tuple[int, int], list[Any]] = {}
        inflight: dict[Any, tuple[int, int, GroupJob]] = {}  # ref -> (slot, generation, job)
        while queue or inflight:
            self._fill(queue, inflight)
            if not inflight:
                raise RolloutPoolError("no live rollout worker can take work")
            ready, _ = ray.wait(list(inflight), num_returns=1)
            for ref in ready:
                slot_i, gen, job = inflight.pop(ref)
                slot = self.slots[slot_i]
                if slot.generation == gen:
                    slot.inflight -= 1
                try:
                    group = ray.get(ref)
                except ray.exceptions.RayActorError:
                    self._worker_died(slot_i, gen)
                    self._retry(job, queue, results)
                    continue
                except ray.exceptions.RayTaskError as exc:
                    if isinstance(exc, _stale_cls()) or isinstance(getattr(exc, "cause", None), _stale_cls()):
                        self.stats.stale_refusals += 1
                        self._resync(slot_i)
                        self._retry(job, queue, results)
                        continue
                    raise RolloutPoolError(f"group {job.key} failed on worker {slot_i}: {exc.cause!r}") from None
                if job.key in results:
                    self.stats.duplicates_dropped += 1
                    continue
                results[job.key] = group
                self.stats.completed += 1
                if on_result is not None:
                    on_result(job, group)
        return [results[k] for k in keys]

    def close(self) -> None:
        """Close the workers' sandbox pools, then end the actors."""
        ray = self._ray
        refs = [s.actor.close.remote() for s in self.slots if s.alive]
        try:
            ray.get(refs, timeout=60)
        except Exception:  # a dead or hung worker must not keep the others alive
            pass
        for s in self.slots:
            ray.kill(s.actor)
            s.alive = False

    def __enter__(self) -> RayRolloutPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------------------

    def _start(self) -> None:
        """Wait for every worker; one lost while starting (OOM kill, node gone) is replaced, one whose
        constructor raised (no sandbox engine, bad model) is an error: a retry would fail the same way."""
        ray = self._ray
        while True:
            failed = []
            for i, s in enumerate(self.slots):
                try:
                    ray.get(s.actor.info.remote())
                except ray.exceptions.RayActorError as exc:
                    if exc.actor_init_failed or self.stats.replacements >= self.max_replacements:
                        self.close()
                        raise RolloutPoolError(f"rollout worker {i} failed to start: "
                                               f"{str(exc).strip().splitlines()[-1]}") from None
                    failed.append(i)
            if not failed:
                return
            for i in failed:
                self.stats.worker_deaths += 1
                self._replace(i)

    def _spawn(self, slot: int) -> Any:
        if not self.servers:
            return self._actor_cls.remote(slot, self._config, self._tokenizer_ref, self._weights_ref, self.version,
                                          **self._worker_kw)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from toolgym.distributed.server_clients import client_options_on_node

        node, options = client_options_on_node(self.servers, slot)
        placed = self._actor_cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
        return placed.remote(slot, None, self._tokenizer_ref, None, self.version, server=options, **self._worker_kw)

    def _fill(self, queue: deque[GroupJob], inflight: dict[Any, tuple[int, int, GroupJob]]) -> None:
        while queue:
            free = [i for i, s in enumerate(self.slots) if s.alive and s.inflight < self.max_in_flight]
            if not free:
                return
            i = min(free, key=lambda k: (self.slots[k].inflight, k))
            job = queue.popleft()
            job.attempts += 1
            slot = self.slots[i]
            ref = slot.actor.run_group.remote(job, self.version)
            inflight[ref] = (i, slot.generation, job)
            slot.inflight += 1
            self.stats.submitted += 1

    def _retry(self, job: GroupJob, queue: deque[GroupJob], results: dict[tuple[int, int], list[Any]]) -> None:
        if job.key in results:
            return
        if job.attempts >= self.max_attempts:
            raise RolloutPoolError(f"group {job.key} lost its worker {job.attempts} times; giving up")
        queue.appendleft(job)
        self.stats.resubmitted += 1

    def _worker_died(self, slot_i: int, gen: int) -> None:
        slot = self.slots[slot_i]
        if slot.generation != gen:  # that incarnation is already replaced
            return
        self.stats.worker_deaths += 1
        self._replace(slot_i)

    def _replace(self, slot_i: int) -> None:
        slot = self.slots[slot_i]
        try:
            self._ray.kill(slot.actor)
        except Exception:
            pass
        if self.stats.replacements >= self.max_replacements:
            slot.alive = False
            return
        self.stats.replacements += 1
        slot.actor = self._spawn(slot_i)  # built from the current weights and version
        slot.generation += 1
        slot.inflight = 0
        slot.alive = True

    def _resync(self, slot_i: int) -> None:
        slot = self.slots[slot_i]
        self._ray.get(slot.actor.load_weights.remote(self.version, self._weights_ref))


def _cpu(weights: dict[str, Any]) -> dict[str, Any]:
    return {k: v.detach().cpu() for k, v in weights.items()}


def _cpu_state(model: Any) -> dict[str, Any]:
    return _cpu(model.state_dict())


def _stale_cls() -> type:
    from toolgym.distributed.worker import StaleWeights

    return StaleWeights

