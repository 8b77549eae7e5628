"""The sizing model: the slower side limits, each side scales linearly with its own node count."""

from __future__ import annotations

import math

from toolgym.distributed.sizing import ComponentCosts, nodes_for, table, throughput

# 1000 tokens/s per replica, 200 tokens per episode -> 5 episodes/s per sampler replica;
# 4 calls of 0.5 s per episode, 4 sandboxes per node -> 2 episodes/s per sandbox node
COSTS = ComponentCosts(batch_tokens_per_s=1000, tokens_per_episode=200, call_s=0.5, calls_per_episode=4,
                       sandboxes_per_node=4)


def test_the_slower_side_limits_and_each_side_scales_with_its_nodes():
    assert throughput(COSTS, 1, 1) == (2.0, "sandbox")
    assert throughput(COSTS, 1, 2) == (4.0, "sandbox")
    assert throughput(COSTS, 1, 3) == (5.0, "sampler")  # sandboxes offer 6/s, one replica feeds only 5/s
    assert throughput(COSTS, 2, 3) == (6.0, "sandbox")
    rate, _ = throughput(COSTS, 8, 8)
    assert math.isclose(rate, 16.0)


def test_nodes_for_a_target_rate():
    assert nodes_for(COSTS, 10.0) == (2, 5)
    n, m = nodes_for(COSTS, 7.0)
    assert throughput(COSTS, n, m)[0] >= 7.0 and throughput(COSTS, n - 1, m)[0] < 7.0
    assert throughput(COSTS, n, m - 1)[0] < 7.0


def test_a_workload_without_tools_is_sampler_bound():
    no_tools = ComponentCosts(1000, 200, 0.5, 0, 4)
    assert throughput(no_tools, 3, 1) == (15.0, "sampler")
    assert "samplers" in table(COSTS, [1, 2], [1, 2, 4])
