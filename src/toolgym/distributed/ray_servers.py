"""Inference servers on a Ray cluster (``distributed: ray`` with ``rollout.sampler: vllm_server``).

One :class:`ServerActor` per inference device (``rollout.servers`` of them; a whole GPU each when the cluster
has GPUs, else a CPU) starts ``vllm serve`` on its node's loopback (:mod:`toolgym.agents.vllm_server`: its
weight-push endpoints never face a network) and describes itself: URL, node, pids. The Ray rollout workers are
placed on those nodes and sample from those URLs (:mod:`.server_clients`).

Weights: :class:`RayServers` is what the trainer pushes to, in place of a sampler. It puts the weights in Ray's
object store once per push; each actor reads that object on its node, writes it to the node's ``/dev/shm`` and
has its server reload it on loopback (``VLLMServerSampler.update_weights``: pause, reload, label, resume), so the
server keeps its pid and tags the tokens it samples afterwards with the new policy version.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from toolgym.distributed.server_clients import CLIENT_FIELDS


class ServerActor:
    """One server on the actor's node (a plain class; :class:`RayServers` makes it an actor). Its server process
    is the actor's child and stops with it."""

    def __init__(self, model: str, options: dict[str, Any]) -> None:
        from toolgym.agents.server_sampler import VLLMServerSampler

        self.sampler = VLLMServerSampler(model, servers=1, **options)

    def describe(self) -> dict[str, Any]:
        """URL, node id, the server's and this actor's pids, and what a client copies."""
        import ray

        s = self.sampler
        out = {"url": s.urls[0], "node": ray.get_runtime_context().get_node_id(), "pid": s.processes[0].pid,
               "actor_pid": os.getpid(), "log": s.processes[0].log_path}
        out.update({name: getattr(s, name) for name in CLIENT_FIELDS})
        return out

    def load(self, version: int, weights: dict[str, Any]) -> str:
        """Weights (checkpoint names) into the server in place, labelled ``version``; returns its label."""
        self.sampler.policy_version = version
        self.sampler.update_weights(weights)
        return self.sampler.weight_version()

    def close(self) -> None:
        self.sampler.close()


class RayServers:
    """``count`` server actors; the trainer pushes weights through it as to a sampler (``update_weights`` with
    ``policy_version`` set). ``options``: the server sampler's options (``vllm_server_train_options`` for the
    cluster's device kind)."""

    name = "vllm_server"
    weight_names = "checkpoint"  # reload_weights reads what save_pretrained writes
    weight_route = None  # each node picks its own (shared memory, or disk when short)

    def __init__(self, model: str, count: int, options: dict[str, Any], *, out: Path | None = None) -> None:
        import ray

        self._ray = ray
        self.policy_version: int | None = None
        gpus = 1.0 if float(ray.cluster_resources().get("GPU", 0)) >= 1 else 0.0
        opts = {k: v for k, v in options.items() if k not in ("servers", "urls")}
        cls = ray.remote(num_cpus=1, num_gpus=gpus, max_restarts=0)(ServerActor)
        self.actors = [cls.remote(model, {**opts, "cpus": [share]}) for share in _core_shares(ray, count, gpus)]
        try:  # side by side: each loads the model while the others do
            self.described = ray.get([a.describe.remote() for a in self.actors])
        except ray.exceptions.RayActorError as exc:
            self.close()
            raise _start_error(exc) from None
        self.urls = [d["url"] for d in self.described]
        if out is not None:  # where each server runs, for the user (and its log on its node)
            (out / "servers.json").write_text(json.dumps(self.described, indent=2))

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """``state_dict`` into the object store once; every actor loads it into its server, all at once."""
        self.load_staged(self.stage_weights(state_dict))

    def stage_weights(self, state_dict: dict[str, Any]) -> Any:
        """The slow half of a push, before any server pauses (``rollout.push_on: schedule``): the weights in the
        object store; the reference is what :meth:`load_staged` takes."""
        return self._ray.put({k: v.detach().cpu() for k, v in state_dict.items()})

    def load_staged(self, staged: Any) -> None:
        """Every actor loads the staged weights into its server, all at once, labelled ``policy_version``."""
        version = int(self.policy_version or 0)
        self._ray.get([a.load.remote(version, staged) for a in self.actors])

    def drop_staged(self, staged: Any) -> None:
        """Nothing to remove: the object store frees the weights once no reference is left."""

    def close(self) -> None:
        """Stop every server (its engine processes too), then end the actors."""
        ray = self._ray
        try:
            ray.get([a.close.remote() for a in self.actors], timeout=120)
        except Exception:  # a dead or hung actor must not keep the others' servers alive
            pass
        for a in self.actors:
            ray.kill(a)
        self.actors = []


def _core_shares(ray: Any, count: int, gpus: float) -> list[str | None]:
    """Each CPU server's own cores when every actor is on this one machine (vLLM would bind them all to the
    same first cores); on GPUs, or several nodes, vLLM's own choice."""
    from toolgym.agents.vllm_server import cpu_shares

    one_node = sum(1 for n in ray.nodes() if n.get("Alive")) == 1
    return cpu_shares(count) if not gpus and one_node else [None] * count


def _start_error(exc: Exception) -> Exception:
    """One line: the server's own reason (``EngineStartError``) when its actor failed to start."""
    import re

    from toolgym.agents.engine_start import EngineStartError

    text = str(exc).strip().splitlines()
    line = next((ln for ln in reversed(text) if "did not start" in ln or "did not answer" in ln), text[-1] if text else "")
    line = re.sub(r"^[\w.]*(?:Error|Exception): ", "", line.strip())  # the reason, not the class's dotted path
    return EngineStartError(f"a server actor failed to start: {line}")
