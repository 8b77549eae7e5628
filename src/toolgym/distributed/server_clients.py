"""Rollout workers that hold no model: each samples from the inference servers the trainer's side started.

With ``rollout.sampler: vllm_server`` a worker (a process of the local pool, or a Ray actor) builds a
:class:`~toolgym.agents.server_sampler.VLLMServerSampler` client on the servers' URLs: it has the tokenizer
and chat template and no weights. Weights go to the servers only; every token's version is the tag its server
returned with it.

Load and affinity: each worker routes among all servers with its own
:class:`~toolgym.agents.server_router.Router`. A group runs whole in one worker, so its requests stay on the
server its first request picked (prefix cache) without any coordination between workers; each worker spreads
its own groups over the servers by its own outstanding count, so the sum over workers is spread too, and no
server idles while a worker has work (a fixed worker-to-server assignment would leave servers idle whenever
there are fewer busy workers than servers). Worker ``i`` starts its list at server ``i mod S``: with empty
routers every worker's first group would otherwise pick the same server. On a Ray cluster a server listens on
its node's loopback, so each worker is placed on a server's node (round robin) and routes among that node's.
"""

from __future__ import annotations

from typing import Any

#: what a client copies from the trainer's sampler (the servers' own settings, not the engine's)
CLIENT_FIELDS = ("per_request_seeds", "max_model_len", "sampling_overrides", "timeout_s", "max_concurrency")


def client_options(sampler: Any, urls: list[str] | None = None) -> dict[str, Any]:
    """The options a worker's client needs, from the sampler that started the servers (``urls``: others)."""
    opts = {name: getattr(sampler, name) for name in CLIENT_FIELDS if hasattr(sampler, name)}
    opts["urls"] = list(sampler.urls if urls is None else urls)
    return opts


def client_options_on_node(servers: list[dict[str, Any]], slot: int) -> tuple[str, dict[str, Any]]:
    """Ray worker ``slot``: the node it runs on (that of server ``slot mod S``) and its client's options there,
    on the servers of that node only (a server listens on its node's loopback)."""
    node = servers[slot % len(servers)]["node"]
    here = [s for s in servers if s["node"] == node]
    opts = {name: here[0][name] for name in CLIENT_FIELDS if name in here[0]}
    opts["urls"] = [s["url"] for s in here]
    return node, opts


def rotated(urls: list[str], slot: int) -> list[str]:
    """``urls`` starting at ``slot mod len(urls)``."""
    k = slot % len(urls)
    return list(urls[k:]) + list(urls[:k])


def build_client(options: dict[str, Any], slot: int) -> Any:
    """A sampler on running servers for worker ``slot`` (its router's list rotated by the slot)."""
    from toolgym.agents.server_sampler import VLLMServerSampler

    opts = dict(options)
    urls = rotated(list(opts.pop("urls")), slot)
    return VLLMServerSampler("served", urls=urls, **opts)
