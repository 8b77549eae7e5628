"""The rollout worker: one Ray actor per node (or per CPU/GPU slice), or one process of a
:class:`~toolgym.distributed.local_pool.LocalRolloutPool`, that owns

- a sampler replica (transformers on the GPU Ray gave the worker, else on CPU; the model is rebuilt from its
  config, then weights load), or with ``server`` a client of running inference servers that holds no
  weights (:mod:`toolgym.distributed.server_clients`),
- a sandbox pool (``open_sandbox(pool_size=...)``) shared by all its episodes,
- the environments (one fresh instance per episode, as in the single-process runner).

Why the sandbox pool lives inside the worker rather than in a separate actor: every tool call is an
``await sandbox.arun(...)`` from the episode coroutine; keeping the pool in the same process avoids one
Ray round trip and one serialisation per tool call, and makes "a node" one failure domain (when the
worker dies its containers go with it and its groups are retried elsewhere). A node runs one worker
whose ``sandbox_pool`` sets how many sandboxes it keeps warm; more sandbox capacity means more workers.

A worker is an asyncio actor: the groups the driver hands it run concurrently, so their generation
requests meet in the sampler's batching queue while other episodes wait on tools.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from toolgym.errors import ToolgymError


def node_device() -> str:
    """Where this worker samples: the GPU Ray made visible to it (``num_gpus`` > 0; Ray hides every GPU from an
    actor that asked for none), else the CPU. ``sampler_kwargs["device"]`` overrides it."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class StaleWeights(ToolgymError):
    """A group was sent for weight version V but the worker holds another version."""


class RolloutWorker:
    """Plain class; the Ray driver turns it into an actor with ``ray.remote(...)``, the local pool runs one in
    each of its processes (``local_pool._child_main``)."""

    def __init__(self, slot: int, model_config: Any, tokenizer: Any, weights: dict[str, Any] | None, version: int,
                 *, sandbox: str | None = "auto", sandbox_pool: int = 1, threads: int = 1,
                 sampler_kwargs: dict[str, Any] | None = None, tool_parser: str | None = None,
                 server: dict[str, Any] | None = None) -> None:
        """``server``: sample from running servers (:func:`~.server_clients.client_options`); ``model_config``
        and ``weights`` are then unused, and ``version`` only labels groups (the servers tag the tokens)."""
        import torch

        from toolgym.agents.chat import ChatTemplate

        torch.set_num_threads(max(1, int(threads)))
        self.slot = slot
        if server is not None:
            from toolgym.distributed.server_clients import build_client

            self.sampler = build_client(server, slot)
        else:
            self.sampler = _replica(model_config, tokenizer, weights or {}, sampler_kwargs)
        self.template = ChatTemplate(tokenizer, tool_parser=tool_parser)
        self.version = version
        self.sampler.policy_version = version  # the runner tags each token with it
        self.sandbox = None
        if sandbox is not None:
            from toolgym.sandbox import open_sandbox

            self.sandbox = open_sandbox(backend=sandbox, pool_size=sandbox_pool)
        self.groups_done = 0
        self.busy_s = 0.0

    def load_weights(self, version: int, weights: dict[str, Any] | None) -> int:
        """Take the trainer's weights (same names as the HF state_dict) and remember their version (None: only
        the version, which servers the worker samples from hold now)."""
        if weights is not None:
            self.sampler.update_weights(weights)
        self.version = version
        self.sampler.policy_version = version
        return version

    def info(self) -> dict[str, Any]:
        return {"slot": self.slot, "pid": os.getpid(), "version": self.version, "groups_done": self.groups_done,
                "busy_s": self.busy_s}

    async def run_group(self, job: Any, version: int | None) -> list[Any]:
        """All ``job.group_size`` episodes of one prompt, with the seeds a single-process run would use.

        ``version``: the weights the group must be sampled with (another version held: :class:`StaleWeights`);
        None takes whatever this worker holds, also if new weights arrive mid-group (each token records its own
        version in ``Trajectory.token_versions``; ``weights_version`` is the one the group started with)."""
        from toolgym.agents.runner import RolloutRunner

        if version is not None and version != self.version:
            raise StaleWeights(f"worker {self.slot} holds weights v{self.version}, the group needs v{version}")
        started_with = self.version
        t0 = time.perf_counter()
        kwargs = dict(job.env_kwargs)
        if self.sandbox is not None:  # else the env keeps its own default, as in a single-process run
            kwargs.setdefault("sandbox", self.sandbox)
        runner = RolloutRunner(self.sampler, self.template, job.env, job.params, job.limits, env_kwargs=kwargs,
                               seed=job.seed)
        trajs = await asyncio.gather(*(runner.run_episode(job.spec, job.task_index, g)
                                       for g in range(job.group_size)))
        for t in trajs:
            t.metadata.update(worker=self.slot, weights_version=started_with, group_key=list(job.key))
        self.groups_done += 1
        self.busy_s += time.perf_counter() - t0
        return list(trajs)

    def close(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None


def _replica(model_config: Any, tokenizer: Any, weights: dict[str, Any], sampler_kwargs: dict[str, Any] | None
             ) -> Any:
    """A transformers copy of the policy, rebuilt from its config, with ``weights`` loaded."""
    from transformers import AutoModelForCausalLM

    from toolgym.agents.hf_sampler import HFSampler

    model = AutoModelForCausalLM.from_config(model_config)
    dtypes = {v.dtype for v in weights.values() if v.is_floating_point()}
    if len(dtypes) == 1:
        model.to(dtypes.pop())
    model.load_state_dict(weights)
    return HFSampler(model.eval(), tokenizer, **{"max_batch_size": 64, "device": node_device(), **(sampler_kwargs or {})})
