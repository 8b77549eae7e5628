"""The trainer's side of ``distributed: ray``: a rollout pool that stands in for the local runner.

The trainer (the Ray driver process) keeps the model, the optimizer and the update; only rollouts go
to the workers. Jobs are built from the very runner the single-process path would use (same sampling
params, limits, runner seed) and the global task index, so the trajectories are the ones a
single-process step would sample. Weights: pushed before the first rollout of a run (after the SFT
warm start or a checkpoint load), then after every update (``Orchestrator.publish``).

Training workers: the update stays in the driver. Data-parallel training (``torchrun``) and Ray
rollouts are not combined in one run yet: each torchrun rank would need its own pool slice; the
config check refuses the combination rather than guess.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolgym.errors import ConfigError


class RayRollouts:
    """Owns the :class:`RayRolloutPool` of a training run."""

    def __init__(self, owner: Any, weights: dict[str, Any] | None, servers: list[dict[str, Any]] | None = None
                 ) -> None:
        """``weights``: the trainer's full policy under Hugging Face names (``policy_weights``: LoRA merged, FSDP
        gathered); the workers rebuild a plain transformers model and load them. ``servers``: the server actors'
        descriptions (:mod:`.ray_servers`): the workers sample from them instead, and hold no weights."""
        from toolgym.agents.sampler_factories import hf_train_options
        from toolgym.distributed.cluster import connect
        from toolgym.distributed.driver import RayRolloutPool

        cfg = owner.cfg  # the run's orchestrator (training.orchestrator): cfg, dist, module, tokenizer, ...
        if owner.dist.world > 1:
            raise ConfigError("distributed: 'ray' cannot be combined with torchrun (WORLD_SIZE > 1) yet; "
                              "run one trainer process with ray.num_workers rollout workers")
        rc = cfg.ray
        connect(rc.address, num_cpus=rc.num_cpus if rc.address in (None, "", "local") else None)
        self.pool = RayRolloutPool(owner.module, owner.tokenizer, num_workers=rc.num_workers,
                                   cpus_per_worker=rc.cpus_per_worker, sandbox=cfg.rollout.sandbox,
                                   sandbox_pool=rc.sandbox_pool, max_in_flight=rc.max_in_flight,
                                   max_replacements=rc.max_replacements,
                                   sampler_kwargs=hf_train_options(cfg, owner.dist.device),
                                   tool_parser=cfg.rollout.tool_parser, weights=weights, servers=servers)
        self._out = owner.out
        self.synced = bool(servers)  # the trainer's pushes go to the servers, not through here

    def sync(self, weights: dict[str, Any]) -> int:
        """Push the trainer's current policy (full, merged, under Hugging Face names) to every replica; returns
        the new version."""
        self.synced = True
        return self.pool.push_weights(weights)

    def run_jobs(self, owner: Any, jobs: Sequence[Any], version: int | None = None) -> list[list[Any]]:
        """A step's groups, in job order, sampled on the workers (``Orchestrator.jobs``: each job names its
        environment and kwargs, the trainer's own sandbox left out; each worker gives envs its node's pool).
        ``version``: the policy version the servers hold for these jobs (sampling ahead: the schedule's, which
        may be older than the trainer's)."""
        from toolgym.agents.runner import flag_mixed_group

        if not self.synced:
            owner.publish()
        version = owner.version if version is None else version
        if self.pool.servers and self.pool.version != version:  # the version the servers hold now
            self.pool.label_version(version)
        groups = self.pool.run(list(jobs))
        for group in groups:
            flag_mixed_group(group)
        return groups

    def close(self) -> None:
        """Write ``ray_pool.json`` (scheduling counters, groups per worker) in the run folder; end the workers."""
        import dataclasses
        import json

        summary = {"stats": dataclasses.asdict(self.pool.stats), "version": self.pool.version,
                   "workers": self.pool.worker_info()}
        try:
            (self._out / "ray_pool.json").write_text(json.dumps(summary, indent=2))
        finally:
            self.pool.close()
