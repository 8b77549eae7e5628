"""A throughput model for sizing a Ray deployment from measured per-component costs.

An episode needs ``tokens_per_episode`` sampled tokens and ``calls_per_episode`` sandbox calls. With
rollouts pipelined (episodes wait on tools while others generate), the steady-state rate is set by the
slower of the two resources:

    sampler side:  N replicas x batch_tokens_per_s / tokens_per_episode        episodes/s
    sandbox side:  M nodes x sandboxes_per_node / (calls_per_episode x call_s)  episodes/s

``batch_tokens_per_s`` is one replica's decode rate at the batch size it actually runs (batching is why
one replica can feed many sandboxes); ``sandboxes_per_node`` is the number of calls a node runs at once
without slowing each (about its cores for CPU-bound tool code; more for tools that wait on I/O). The
model ignores the driver and the weight push (both small per step; see benchmarks/scaling.py for the
measured overhead) and assumes enough groups in flight to keep both sides busy.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ComponentCosts:
    """Measured costs (benchmarks/scaling.py prints them for the machine it runs on)."""

    batch_tokens_per_s: float  # one sampler replica's decode rate at its working batch size
    tokens_per_episode: float
    call_s: float  # one sandbox call, wall seconds, on an otherwise idle sandbox
    calls_per_episode: float
    sandboxes_per_node: float  # concurrent calls one node sustains at full speed

    def sampler_rate(self, replicas: int) -> float:
        """Episodes/s the sampler side can feed."""
        if self.tokens_per_episode <= 0:
            return float("inf")
        return replicas * self.batch_tokens_per_s / self.tokens_per_episode

    def sandbox_rate(self, nodes: int) -> float:
        """Episodes/s the sandbox side can serve."""
        work = self.calls_per_episode * self.call_s
        if work <= 0:
            return float("inf")
        return nodes * self.sandboxes_per_node / work


def throughput(costs: ComponentCosts, sampler_replicas: int, sandbox_nodes: int) -> tuple[float, str]:
    """Modelled episodes/s and the side that limits it ("sampler" or "sandbox")."""
    s, b = costs.sampler_rate(sampler_replicas), costs.sandbox_rate(sandbox_nodes)
    return (s, "sampler") if s <= b else (b, "sandbox")


def nodes_for(costs: ComponentCosts, episodes_per_s: float) -> tuple[int, int]:
    """The fewest (sampler replicas, sandbox nodes) that reach ``episodes_per_s``."""
    import math

    per_s = costs.sampler_rate(1)
    per_b = costs.sandbox_rate(1)
    n = 0 if per_s == float("inf") else max(1, math.ceil(episodes_per_s / per_s))
    m = 0 if per_b == float("inf") else max(1, math.ceil(episodes_per_s / per_b))
    return n, m


def table(costs: ComponentCosts, samplers: list[int], sandboxes: list[int]) -> str:
    """A text grid: rows = sampler replicas, columns = sandbox nodes, cells = episodes/s and the limiting
    side (gen: sampler-bound, sbx: sandbox-bound)."""
    head = "samplers \\ sandbox nodes | " + " | ".join(f"{m:>12d}" for m in sandboxes)
    lines = [head, "-" * len(head)]
    for n in samplers:
        cells = []
        for m in sandboxes:
            rate, side = throughput(costs, n, m)
            cells.append(f"{rate:7.2f} ({'gen' if side == 'sampler' else 'sbx'})")
        lines.append(f"{n:>24d} | " + " | ".join(cells))
    return "\n".join(lines)
