"""The rollout side of a training run: samplers, sandbox pool, rollout runners, rollout workers, weight sync,
the order of prompts and evaluation. The trainer asks it for a step's groups and tells it when the weights
changed; nothing it builds refers back to it (prime-rl calls this part the orchestrator).

Three ways a step's groups are made, chosen by the config:

- in the trainer's process (``rollout.workers: 0``, ``rollout.max_staleness: 0``): the sampler runs the
  trainer's module (or its own engine, vLLM), exactly as before the pipeline existed;
- by rollout worker processes (``rollout.workers >= 1``) or Ray actors (``distributed: ray``); with a server
  sampler (``vllm_server``) the workers hold no model: they sample from the servers this process started
  (:mod:`toolgym.distributed.server_clients`) or the server actors on their node, and the weights go to the
  servers only;
- ahead of the update (``rollout.max_staleness: K >= 1``): step ``s + K`` is sampled by the workers with the
  weights of step ``s`` while the trainer updates on step ``s`` (:mod:`toolgym.training.pipeline`); with a
  sampler that takes weights while it samples (``vllm_server``), by that sampler from a thread of this
  process, or by the Ray workers on the server actors (Ray workers that hold a model sample synchronously).
  ``rollout.push_on: schedule`` (the default with ``partial: false``): version ``v + 1`` reaches the servers
  only once every group scheduled on ``v`` has returned, so each token's version is the schedule's;
  ``update``: each push reaches the servers at once (their tokens tagged with the version that sampled them).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from toolgym.agents.trajectory import Trajectory
from toolgym.training.outputs.rollout_stats import trajectory_stats, warn_infra
from toolgym.training.sampling.mixture import Mixture, TaskOrder, env_metrics
from toolgym.training.update import data_parallel as D


def pushes_on_schedule(rollout: Any) -> bool:
    """Server pushes follow the schedule, not the update (``rollout.push_on``; null: unless ``partial``)."""
    return (rollout.push_on or ("update" if rollout.partial else "schedule")) == "schedule"


class Planned(NamedTuple):
    """One group of a step or an evaluation: the runner of its environment, its task, the environment's kwargs
    (as the runner got them) and the mixture entry's name (metrics, saved rollouts)."""

    runner: Any
    spec: Any
    env_kwargs: dict[str, Any]
    name: str


class Orchestrator:
    """Owns everything that samples. Built by the trainer with what the rollouts need from it."""

    def __init__(self, cfg: Any, *, module: Any, tokenizer: Any, template: Any, dist: Any, out: Path,
                 sampler_spec: Any, say: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.module = module
        self.tokenizer = tokenizer
        self.template = template
        self.dist = dist
        self.out = out
        self.sampler_spec = sampler_spec
        self.say = say
        self.sandbox: Any = None
        self.sampler: Any = None
        self.ray_rollouts: Any = None
        self.pool: Any = None  # LocalRolloutPool: rollout worker processes
        self.ahead: Any = None  # AheadRollouts: the asynchronous pipeline
        self.policy_sync: Any = None
        self.version = 0  # the policy version of the trainer's current weights (= training steps done)
        self._pool_lock = threading.Lock()  # the pipeline's thread and evaluations share the workers
        self._pusher: threading.Thread | None = None  # a push to the servers in progress (max_staleness >= 1)
        self._push_error: BaseException | None = None  # what that push raised: the next wait_push raises it
        self._staged: dict[int, Any] = {}  # push_on schedule: each version's weights, staged for the servers
        self.entries = cfg.rollout.mixture()  # rollout.env is a one-entry mixture
        self.names = [e.label for e in self.entries]
        self.mixture = Mixture([e.weight for e in self.entries], cfg.rollout.prompts_per_step, cfg.seed)
        self.orders = [TaskOrder(self.probe_source_size(i), str(cfg.seed) if len(self.entries) == 1
                                 else f"{cfg.seed}:{e.label}") for i, e in enumerate(self.entries)]
        self.source_size = self.orders[0].size

    # -- building -------------------------------------------------------------------------------------------

    @property
    def workers(self) -> int:
        """Rollout worker processes (0: rollouts in this process)."""
        r = self.cfg.rollout
        return max(r.workers, 1) if r.max_staleness and not self.serves_ahead else r.workers

    @property
    def serves_ahead(self) -> bool:
        """The sampler takes weight pushes while it samples (a server): the pipeline needs no workers, and every
        push goes to it at once, labelled with the policy version."""
        return bool(self.sampler_spec.pushes_while_sampling)

    @property
    def scheduled_pushes(self) -> bool:
        return self.serves_ahead and pushes_on_schedule(self.cfg.rollout)

    def start(self) -> None:
        """The sandbox pool, the sampler (or the workers) and the weight sync."""
        cfg = self.cfg
        r = cfg.rollout
        if r.sandbox is not None and not self.workers:  # workers keep a sandbox pool each
            from toolgym.sandbox import open_sandbox

            self.sandbox = open_sandbox(backend=r.sandbox, pool_size=r.sandbox_pool or None)
        from toolgym.training.sampling.policy_sync import PolicySync, engine_sleeps, policy_weights

        spec = self.sampler_spec
        ray_servers = cfg.distributed == "ray" and self.serves_ahead
        if self.workers and not self.serves_ahead:
            self.pool = self._start_pool(policy_weights(self.module))
        elif ray_servers:  # servers as Ray actors; the trainer pushes to them through their actors
            self.sampler = self._start_ray_servers()
        else:
            # in-process: the trainer's own module, on its device, nothing to copy; an engine with its own copy
            # loads the configured model (PolicySync.push replaces its weights before the first rollout)
            model = self.module if spec.in_process else self.engine_model() if spec.needs_weight_push \
                else cfg.model.name_or_path
            self.sampler = spec.build_for(model, purpose="train", tokenizer=self.tokenizer, base_url=r.base_url,
                                          seed=cfg.seed, **spec.options_for_training(cfg, self.dist.device))
            if not spec.follows_training:  # only with rollout.frozen_policy_ok (the config refuses it otherwise)
                import warnings

                where = f"the server at {r.base_url}" if spec.remote else "the sampler"
                msg = (f"rollout.sampler={r.sampler}: {where} gets no weight updates, so every step "
                       "samples the initial policy (rollout.frozen_policy_ok: true)")
                warnings.warn(msg, stacklevel=2)
                self.say(f"warning: {msg}")
        if cfg.distributed == "ray":  # rollouts on Ray workers; evaluations too with servers, else the local sampler
            from toolgym.distributed.ray_rollouts import RayRollouts

            self.ray_rollouts = RayRollouts(self, None, self.sampler.described) if ray_servers \
                else RayRollouts(self, policy_weights(self.module))
        if self.workers and self.serves_ahead:  # episodes in workers, sampling on the servers started above
            self.pool = self._start_server_pool()
        if self.pool is None or self.serves_ahead:
            self.policy_sync = PolicySync(self.sampler, self.module, sleep=engine_sleeps(cfg, self.dist.device),
                                          ray_rollouts=None if ray_servers else self.ray_rollouts,
                                          device=self.dist.device,
                                          say=self.say, needs_weight_push=spec.needs_weight_push)

    def _start_pool(self, weights: dict[str, Any]) -> Any:
        from toolgym.agents.sampler_factories import hf_train_options
        from toolgym.distributed.local_pool import LocalRolloutPool

        r = self.cfg.rollout
        self.say(f"starting {self.workers} rollout worker process(es)"
                 + (f", sampling up to {r.max_staleness} step(s) ahead of the update" if r.max_staleness else ""))
        self._share_cores()
        return LocalRolloutPool(self.module, self.tokenizer, num_workers=self.workers, threads=1,
                                sandbox=r.sandbox, sandbox_pool=r.sandbox_pool or 1,
                                group_deadline_s=r.group_deadline_s,
                                sampler_kwargs=hf_train_options(self.cfg, "cpu"), tool_parser=r.tool_parser,
                                weights=weights)

    def _start_server_pool(self) -> Any:
        """Worker processes that run the episodes and sample from this run's servers: no model, no weights."""
        from toolgym.distributed.local_pool import LocalRolloutPool
        from toolgym.distributed.server_clients import client_options

        r = self.cfg.rollout
        options = client_options(self.sampler)
        self.say(f"starting {self.workers} rollout worker process(es) that sample from {len(options['urls'])} "
                 "server(s)" + (f", up to {r.max_staleness} step(s) ahead of the update" if r.max_staleness else ""))
        return LocalRolloutPool(None, self.tokenizer, num_workers=self.workers, threads=1, sandbox=r.sandbox,
                                sandbox_pool=r.sandbox_pool or 1, group_deadline_s=r.group_deadline_s,
                                tool_parser=r.tool_parser, server=options)

    def _start_ray_servers(self) -> Any:
        """``rollout.servers`` server actors on the Ray cluster (a GPU each where it has GPUs)."""
        from toolgym.distributed.cluster import connect
        from toolgym.distributed.ray_servers import RayServers

        cfg, rc = self.cfg, self.cfg.ray
        ray = connect(rc.address, num_cpus=rc.num_cpus if rc.address in (None, "", "local") else None)
        device = "cuda" if float(ray.cluster_resources().get("GPU", 0)) >= 1 else "cpu"
        options = {"seed": cfg.seed, **self.sampler_spec.options_for_training(cfg, device)}
        self.say(f"starting {cfg.rollout.servers} vLLM server actor(s) on the Ray cluster ({device})")
        return RayServers(self.engine_model(), int(cfg.rollout.servers), options, out=self.out)

    def _share_cores(self) -> None:
        """On the CPU, each worker samples on one core: the update keeps the rest, so the two sides do not
        fight over the same cores while they overlap."""
        import os

        import torch

        if torch.device(self.dist.device).type != "cpu":
            return
        mine = max(1, len(os.sched_getaffinity(0)) - self.workers)
        if torch.get_num_threads() > mine:
            torch.set_num_threads(mine)
            self.say(f"the update uses {mine} CPU thread(s); the {self.workers} rollout worker(s) one each")

    def engine_model(self) -> str:
        """What a separate engine loads at start (its weights are replaced before use): the demo model's saved
        folder, else the configured name (a local path, asset or Hub id, resolved by the sampler)."""
        if self.cfg.model.name_or_path.startswith("demo"):
            return str(self.out / "demo-model")
        return self.cfg.model.name_or_path

    @property
    def samples_elsewhere(self) -> bool:
        """Rollouts come from weights other than the trainer's module itself: the behaviour gap is then worth
        measuring, and the update may not take its first mini-batch's old log-probs from its own forward."""
        return self.pool is not None or (self.policy_sync is not None and self.policy_sync.samples_elsewhere)

    # -- what a step samples --------------------------------------------------------------------------------

    def env_kwargs(self, base: dict[str, Any], split: str) -> dict[str, Any]:
        kw = dict(base)
        kw.setdefault("partition", split)
        if self.sandbox is not None:
            kw.setdefault("sandbox", self.sandbox)
        return kw

    def runner(self, env_id: str, env_kwargs: dict[str, Any], temperature: float, top_p: float, seed: int) -> Any:
        from toolgym.agents.runner import EpisodeLimits, RolloutRunner
        from toolgym.agents.sampling import SamplingParams

        r = self.cfg.rollout
        params = SamplingParams(temperature=temperature, top_p=top_p, max_tokens=r.max_new_tokens)
        limits = EpisodeLimits(max_turns=r.max_turns, max_total_tokens=r.max_response_tokens + 2048)
        from toolgym.agents.program_episode import program_runner

        program = program_runner(self.sampler, self.template, env_id, env_kwargs, params, limits, seed)
        if program is not None:  # an agent program (toolgym/Program-v0) runs its own turns through a proxy
            if self.pool is not None or self.ray_rollouts is not None:
                from toolgym.errors import ConfigError

                raise ConfigError(f"{env_id} runs its program in the trainer's process: set rollout.workers: 0, "
                                  "rollout.max_staleness: 0 and no distributed: ray")
            return program
        return RolloutRunner(self.sampler, self.template, env_id, params, limits, env_kwargs=env_kwargs, seed=seed)

    def probe_source_size(self, entry: int = 0) -> int:
        """How many training tasks an environment's source holds (0: unbounded), from an env built the way a run
        builds it."""
        from toolgym.envs.registry import make_env

        e = self.entries[entry]
        kw = {k: v for k, v in self.env_kwargs(e.env_kwargs, self.cfg.rollout.split).items() if k != "sandbox"}
        env = make_env(e.env, kw, sandbox=None)
        try:
            src = getattr(env.unwrapped, "source", None)
            return int(getattr(src, "size", 0) or 0)
        finally:
            env.close()

    def task_indices(self, cursor: int, count: int, entry: int = 0) -> list[int]:
        """Task indices of an environment from its cursor on: its stream in order (infinite sources), or a seeded
        permutation per epoch."""
        return [self.orders[entry].index(k) for k in range(cursor, cursor + count)]

    def step_plan(self, step: int, cursor: int) -> list[Planned]:
        """This rank's share of a step's groups, in prompt-slot order: each slot's environment drawn by weight
        (:mod:`toolgym.training.sampling.mixture`; one environment: all of them, from ``cursor``), its task next in that
        environment's order. A slot's position is its task index for the runner (group id, sampling seeds), so
        the seeds do not depend on which environment a neighbouring slot drew."""
        from toolgym.agents.runner import TaskSpec

        r = self.cfg.rollout
        per_rank = r.prompts_per_step // self.dist.world
        slots = [(0, cursor + k) for k in range(r.prompts_per_step)] if len(self.entries) == 1 \
            else self.mixture.plan(step)
        seed = (self.cfg.seed * 1_000_003 + step * 7_919 + self.dist.rank * 104_729) % (2**31 - 1)
        runners: dict[int, tuple[Any, dict[str, Any]]] = {}
        plan = []
        for pos, (e, at) in enumerate(slots[self.dist.rank * per_rank : (self.dist.rank + 1) * per_rank]):
            if e not in runners:
                kw = self.env_kwargs(self.entries[e].env_kwargs, r.split)
                runners[e] = (self.runner(self.entries[e].env, kw, r.temperature, r.top_p, seed), kw)
            i = self.orders[e].index(at)
            plan.append(Planned(runners[e][0], TaskSpec(seed=i, options={"index": i}, index=pos), runners[e][1],
                                self.names[e]))
        return plan

    def jobs(self, plan: list[Planned], group_size: int, key: int) -> list[Any]:
        """The groups of a step (or an evaluation) as jobs for rollout workers, each with its environment, its
        kwargs and the runner's seeds (each worker gives the environments its own sandbox pool; the trainer's
        open sandbox stays here)."""
        from toolgym.distributed.driver import GroupJob

        jobs = []
        for ti, p in enumerate(plan):
            kw = {k: v for k, v in p.env_kwargs.items() if not (k == "sandbox" and not isinstance(v, str))}
            jobs.append(GroupJob(key=(key, ti), task_index=ti if p.spec.index is None else p.spec.index, spec=p.spec,
                                 group_size=group_size, env=p.runner.env_id, env_kwargs=kw, params=p.runner.params,
                                 limits=p.runner.limits, seed=p.runner.seed))
        return jobs

    def _run_here(self, plan: list[Planned], group_size: int) -> list[list[Trajectory]]:
        """The plan's groups in this process: one runner per environment, all at once (the sampler batches
        their requests together), back in plan order."""
        by_runner: dict[int, list[int]] = {}
        for k, p in enumerate(plan):
            by_runner.setdefault(id(p.runner), []).append(k)

        async def run_all() -> list[list[list[Trajectory]]]:
            return list(await asyncio.gather(*(plan[ks[0]].runner.arun([plan[k].spec for k in ks], group_size)
                                               for ks in by_runner.values())))

        groups: list[list[Trajectory]] = [[] for _ in plan]
        for ks, out in zip(by_runner.values(), asyncio.run(run_all()), strict=True):
            for k, g in zip(ks, out, strict=True):
                groups[k] = g
        return groups

    def _sample(self, plan: list[Planned], group_size: int, key: int, version: int,
                weights: dict[str, Any] | None = None, *, ray: bool = True) -> list[list[Trajectory]]:
        """The plan's groups from the rollout workers, the Ray workers (``ray``: training steps; evaluations use
        the local sampler) or this process, each trajectory tagged with its environment's name
        (``metadata["env"]``)."""
        groups: list[list[Trajectory]] = []
        if self.pool is not None:
            if plan:
                with self._pool_lock:
                    if self.scheduled_pushes and self.ahead is not None:  # workers on servers: load it first
                        self._servers_at(version)
                    self._pool_at(version, weights)
                    groups = self._run_pool(self.jobs(plan, group_size, key))
        elif self.scheduled_pushes and self.ahead is not None:
            with self._pool_lock:  # the pipeline's thread and evaluations take turns on the servers
                self._servers_at(version)
                if self.ray_rollouts is not None:  # Ray workers on the server actors: training and evaluations
                    groups = self.ray_rollouts.run_jobs(self, self.jobs(plan, group_size, key), version) if plan else []
                else:
                    groups = self._run_here(plan, group_size) if plan else []
        elif ray and self.ray_rollouts is not None:
            if self.module is not None:
                self.module.eval()
            groups = self.ray_rollouts.run_jobs(self, self.jobs(plan, group_size, key), version) if plan else []
        else:
            if self.module is not None and getattr(self.sampler, "model", None) is self.module:
                self.module.eval()
            with self.decoding():  # a collective under FSDP: every rank enters, even one without tasks
                groups = self._run_here(plan, group_size) if plan else []
        for p, group in zip(plan, groups, strict=True):
            for t in group:
                t.metadata["env"] = p.name
        return groups

    def rollouts(self, step: int, cursor: int) -> list[list[Trajectory]]:
        """One step's groups, sampled now with the current weights (the synchronous path)."""
        return self._sample(self.step_plan(step, cursor), self.cfg.rollout.group_size, step, self.version)

    def groups(self, step: int, cursor: int) -> tuple[list[list[Trajectory]], dict[str, float]]:
        """The groups the trainer updates on at ``step`` and what the pipeline measured getting them."""
        if self.ahead is not None:
            return self.ahead.take(step)
        return self.rollouts(step, cursor), {}

    def decoding(self) -> Any:
        """Around every decode on the trainer's own module (the ``hf`` sampler): under FSDP the full weights,
        gathered once on every rank, so ranks that generate different lengths issue no collectives."""
        if self.sampler is None or getattr(self.sampler, "model", None) is not self.module:
            return contextlib.nullcontext()
        return D.full_params_for_decoding(self.module)

    # -- rollout workers --------------------------------------------------------------------------------------

    def _pool_at(self, version: int, weights: dict[str, Any] | None = None) -> None:
        """The workers on policy ``version`` (the caller holds the pool lock); workers on servers only learn the
        version the servers already hold."""
        if self.pool.version == version:
            return
        if self.serves_ahead:
            self.pool.label_version(version)
            return
        self.pool.push_weights(self._weights(copy=False) if weights is None else weights, version=version)

    def _run_pool(self, jobs: list[Any]) -> list[list[Trajectory]]:
        from toolgym.agents.runner import flag_mixed_group

        groups = self.pool.run(jobs)
        for group in groups:
            flag_mixed_group(group)
        return groups

    def start_ahead(self, first_step: int, pending: dict[int, list[list[Trajectory]]] | None = None) -> None:
        """With ``rollout.max_staleness >= 1``: start sampling ahead of the update from ``first_step`` (a resume
        hands back the batches its checkpoint kept)."""
        if not self.cfg.rollout.max_staleness:
            return
        from toolgym.training.pipeline import AheadRollouts

        self.ahead = AheadRollouts(self, lag=self.cfg.rollout.max_staleness, first_step=first_step,
                                   last_step=self.cfg.steps, pending=pending)
        if self.scheduled_pushes:  # the servers hold it (publish pushed it); kept in case an evaluation moves them
            self._stage_behind(self.version, held=True)
        else:  # a server already holds this version (publish pushed it): the thread needs no copy
            self.ahead.publish(self.version, {} if self.serves_ahead else self._weights(copy=True))

    def sample_step(self, step: int, version: int, weights: dict[str, Any]) -> list[list[Trajectory]]:
        """Step ``step``'s groups sampled by the workers with the weights of policy ``version`` (the pipeline's
        thread calls this)."""
        r = self.cfg.rollout
        groups = self._sample(self.step_plan(step, step * r.prompts_per_step), r.group_size, step, version, weights)
        if self.scheduled_pushes:
            self._drop_staged_before(version)
        return groups

    def _weights(self, *, copy: bool) -> dict[str, Any]:
        """The current policy on the CPU. ``copy``: a snapshot that later updates leave alone (the pipeline holds
        versions); without it, views the pool packs into shared memory at once (one copy, not two)."""
        from toolgym.training.sampling.policy_sync import policy_weights

        return {k: v.detach().to("cpu", copy=copy) for k, v in policy_weights(self.module).items()}

    # -- weights ----------------------------------------------------------------------------------------------

    def publish(self, version: int | None = None) -> None:
        """The trainer's weights changed (an update, the SFT warm start, a resume): they become policy
        ``version`` for every engine and worker that samples."""
        if version is not None:
            self.version = version
        if self.serves_ahead:  # the servers take it now, in-flight requests as rollout.partial says
            if self.ahead is None:
                self._push_labelled()
            elif self.scheduled_pushes:
                self._stage_behind(self.version)
            else:
                self._push_behind()
        elif self.ahead is not None:
            self.ahead.publish(self.version, self._weights(copy=True))
        elif self.pool is not None:
            with self._pool_lock:
                self.pool.push_weights(self._weights(copy=False), version=self.version)
        else:
            self.policy_sync.push()

    def before_update(self) -> None:
        if self.policy_sync is not None:
            self.policy_sync.before_update()  # a vLLM engine on the trainer's GPU sleeps through the update

    def after_update(self, version: int) -> None:
        """The update made policy ``version``: wake a sleeping engine and give it (or the workers) the weights."""
        self.version = version
        if self.policy_sync is not None and not self.serves_ahead:
            self.policy_sync.after_update()
        else:
            self.publish()

    def _push_labelled(self) -> None:
        """The weights to a sampler that tags tokens itself, labelled with their policy version."""
        self.sampler.policy_version = self.version
        self.policy_sync.push()

    def _push_behind(self) -> None:
        """With the pipeline: a snapshot of the weights now, pushed to the servers by a thread while the trainer
        goes on (a push waits for the requests in flight, unless rollout.partial); the version is published to the
        pipeline once the servers hold it, so no step is sampled with older weights than its schedule says."""
        weights = self.policy_sync.engine_names(self._weights(copy=True))  # a snapshot: the update goes on
        version, ahead = self.version, self.ahead
        self.wait_push()  # pushes reach the servers in order

        def push() -> None:
            try:
                self.sampler.policy_version = version
                self.sampler.update_weights(weights)
                self.policy_sync.pushes += 1
                ahead.publish(version, {})
            except BaseException as exc:  # the trainer raises it at its next batch, push or evaluation
                self._push_error = exc
                ahead.fail(exc)

        self._pusher = threading.Thread(target=push, name="toolgym-weight-push", daemon=True)
        self._pusher.start()

    def _stage_behind(self, version: int, *, held: bool = False) -> None:
        """push_on schedule: a snapshot of the weights now, written for the servers by a thread while the trainer
        goes on, then published to the pipeline; the servers load it when the first step scheduled on it is
        sampled (:meth:`_servers_at`), after every group of the version before has returned. ``held``: the
        servers hold it already (published at once; the folder serves after an evaluation moved them)."""
        weights = self.policy_sync.engine_names(self._weights(copy=True))  # a snapshot: the update goes on
        ahead = self.ahead
        self.wait_push()  # one folder written at a time, in version order
        if held:
            ahead.publish(version, {})

        def stage() -> None:
            try:
                self._staged[version] = self.sampler.stage_weights(weights)
                if not held:
                    ahead.publish(version, {})
            except BaseException as exc:  # the trainer raises it at its next batch, push or evaluation
                self._push_error = exc
                ahead.fail(exc)

        self._pusher = threading.Thread(target=stage, name="toolgym-weight-stage", daemon=True)
        self._pusher.start()

    def _servers_at(self, version: int) -> None:
        """The servers on policy ``version`` before a step (or an evaluation) is sampled, from the folder staged
        for it. The caller holds the pool lock."""
        if getattr(self.sampler, "policy_version", None) == version:
            return
        self.sampler.policy_version = version
        self.sampler.load_staged(self._staged[version])
        self.policy_sync.pushes += 1

    def _drop_staged_before(self, version: int) -> None:
        """The pipeline samples ``version`` now: no later step (nor an evaluation, which samples the newest)
        needs an older one."""
        for old in [v for v in list(self._staged) if v < version]:
            self.sampler.drop_staged(self._staged.pop(old))

    def wait_push(self) -> None:
        """Until the servers hold the last published weights; a push that failed is raised here, so that one
        after the last step (no batch is taken after it) still ends the run with its error."""
        if self._pusher is not None:
            self._pusher.join()
            self._pusher = None
        if self._push_error is not None:
            from toolgym.training.pipeline import PipelineError

            exc, self._push_error = self._push_error, None
            raise PipelineError(f"a weight push to the servers failed: {exc}") from exc

    @property
    def pushes(self) -> int:
        if self.pool is not None and not self.serves_ahead:
            return int(self.pool.stats.weight_pushes)
        return self.policy_sync.pushes

    # -- evaluation -------------------------------------------------------------------------------------------

    def eval_entries(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(name, env id, env kwargs) of each environment an evaluation covers: eval.env, else every training
        environment with its own kwargs."""
        from toolgym.training.config_schema import env_label

        e = self.cfg.eval
        if e.env:
            return [(env_label(e.env), e.env, e.env_kwargs or self.cfg.rollout.env_kwargs)]
        if len(self.entries) == 1:
            return [(self.names[0], self.entries[0].env, e.env_kwargs or self.entries[0].env_kwargs)]
        return [(name, entry.env, entry.env_kwargs) for name, entry in zip(self.names, self.entries, strict=True)]

    def evaluate(self, step: int) -> dict[str, float]:
        """Held-out tasks (eval.split) with a fixed seed and the current weights: mean reward and tool-use rate,
        over every evaluated environment and (several of them) per environment: eval.tasks tasks of each."""
        from toolgym.agents.runner import TaskSpec

        e = self.cfg.eval
        self.wait_push()  # the current weights (push_on schedule: their folder), not the ones before the update
        mine = list(range(self.dist.rank, e.tasks, self.dist.world))
        plan = []
        entries = self.eval_entries()
        for name, env, base in entries:
            kw = self.env_kwargs(base, e.split)
            runner = self.runner(env, kw, e.temperature, e.top_p, seed=self.cfg.seed * 31 + 17)
            plan += [Planned(runner, TaskSpec(seed=i, options={"index": i}, index=pos), kw, name)
                     for pos, i in enumerate(mine)]
        names = [name for name, _, _ in entries]  # every rank's, also one without tasks: they gather together
        where = f" of each of {len(names)} environments" if len(names) > 1 else ""
        self.say(f"eval at step {step}: {e.tasks} held-out tasks{where} x {e.samples}")
        t0 = time.perf_counter()
        # Ray workers on servers evaluate too (the trainer's process runs no model text); others sample here
        groups = self._sample(plan, e.samples, -1 - step, self.version, ray=self.serves_ahead)
        trajs = [t for g in groups for t in g]
        allstats = D.all_gather_objects(trajectory_stats(trajs), self.dist)
        n = sum(s["n"] for s in allstats)
        res = {k: sum(s[k] * s["n"] for s in allstats) / max(n, 1) for k in ("reward_mean", "tool_rate", "response_tokens")}
        infra = sum(s["infra_failures"] for s in allstats)
        res.update(episodes=n, infra_failures=infra, eval_s=time.perf_counter() - t0)
        if len(names) > 1:
            res.update(self.env_metrics(trajs, names))
        warn_infra(self.say, f"eval at step {step}", infra, n, "scored 0")  # the reward then understates the policy
        return res

    def env_metrics(self, trajs: list[Trajectory], names: list[str] | None = None) -> dict[str, float]:
        """Per-environment episodes, reward and tool-use rate over every process's ``trajs`` (nothing for a
        one-environment run: its totals say it all)."""
        names = names or self.names
        if len(names) < 2:
            return {}
        mine = {name: trajectory_stats([t for t in trajs if t.metadata.get("env") == name]) for name in names}
        return env_metrics(D.all_gather_objects(mine, self.dist), names)

    # -- checkpoints and the end ------------------------------------------------------------------------------

    def checkpoint_state(self, next_step: int) -> dict[str, Any]:
        """What a checkpoint at ``next_step`` keeps of the rollout side: the batches already sampled ahead."""
        if self.ahead is None:
            return {}
        return {"pending": self.ahead.pending(next_step)}

    def _drop_staged(self) -> None:
        for staged in self._staged.values():
            self.sampler.drop_staged(staged)
        self._staged.clear()

    def close(self) -> None:
        """Stop the pipeline, then the workers, the Ray pool, the sandbox and the sampler (every one, whatever
        fails first)."""
        closers = [self.wait_push, getattr(self.ahead, "close", None), self._drop_staged,
                   getattr(self.pool, "close", None), getattr(self.ray_rollouts, "close", None), getattr(self.sandbox, "close", None),
                   getattr(self.sampler, "close", None)]  # a vLLM engine's worker processes and memory go with it
        error: BaseException | None = None
        for close in closers:
            if close is None:
                continue
            try:
                close()
            except BaseException as exc:  # the rest still close
                error = error or exc
        if error is not None:
            raise error
