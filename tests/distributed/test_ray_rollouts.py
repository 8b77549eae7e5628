"""Rollouts on a local Ray cluster: same trajectories as one process, exactly-once groups when a worker
is killed mid-run, weight versions."""

from __future__ import annotations

import asyncio
import functools
import os
import subprocess
import sys
import time
from collections import Counter

import pytest
import torch

from toolgym.agents.chat import ChatTemplate
from toolgym.agents.hf_sampler import HFSampler
from toolgym.agents.runner import EpisodeLimits, RolloutRunner, TaskSpec
from toolgym.agents.sampling import SamplingParams
from toolgym.distributed.driver import GroupJob, RayRolloutPool
from toolgym.distributed.loadenv import SandboxLoadEnv
from toolgym.distributed.worker import StaleWeights
from toolgym.sandbox import open_sandbox
from toolgym.training.model.demo import build_demo

PARAMS = SamplingParams(temperature=1.0, max_tokens=6)
LIMITS = EpisodeLimits(max_turns=3, max_total_tokens=256)
SEED = 11
# One row per forward pass and one torch thread on both sides (each worker has one; the local runner takes
# the one_torch_thread fixture), so equal episodes are equal bit for bit; with different batches the logits
# differ in float rounding and a token can flip.
# No prefix reuse: which kept caches a prompt meets depends on what ran before it on that replica.
ONE_ROW = {"max_batch_size": 1, "prefix_cache_mb": 0}


@pytest.fixture(scope="module")
def policy():
    corpus = ["Call the work tool.", "Job 3: run the workload 2 times.", "```python\nprint(1)\n```"] * 40
    return build_demo(corpus, None, vocab_size=300, layers=1, hidden=32, heads=2, intermediate=64,
                      max_positions=256, seed=0)


@pytest.fixture(scope="module")
def pool(ray_cluster, policy):
    model, tok = policy
    with RayRolloutPool(model, tok, num_workers=2, sandbox="auto", sandbox_pool=2, max_in_flight=2,
                        sampler_kwargs=ONE_ROW) as p:
        yield p


def _jobs(n: int, group: int, step: int = 0, **env_kw) -> list[GroupJob]:
    env = functools.partial(SandboxLoadEnv, turns=2, iters=2_000, **env_kw)
    return [GroupJob(key=(step, i), task_index=i, spec=TaskSpec(seed=100 + i), group_size=group, env=env,
                     params=PARAMS, limits=LIMITS, seed=SEED) for i in range(n)]


def _local(policy, n: int, group: int) -> list[list]:
    model, tok = policy
    with open_sandbox("auto", pool_size=2) as sb:
        runner = RolloutRunner(HFSampler(model, tok, **ONE_ROW), ChatTemplate(tok),
                               lambda: SandboxLoadEnv(sandbox=sb, turns=2, iters=2_000), PARAMS, LIMITS, seed=SEED)
        return asyncio.run(runner.arun([TaskSpec(seed=100 + i) for i in range(n)], group))


def _ids(groups):
    return [[(t.task_id, t.prompt_ids, t.response_ids, t.loss_mask, t.behavior_logprobs, t.reward) for t in g]
            for g in groups]


@pytest.mark.slow
def test_groups_equal_the_single_process_runner_in_task_order(pool, policy, one_torch_thread):
    groups = pool.run(_jobs(6, 3))
    assert _ids(groups) == _ids(_local(policy, 6, 3))
    assert all(t.reward == 1.0 and t.finish_reason == "answer" for g in groups for t in g)  # sandbox ran the tool
    assert {t.metadata["worker"] for g in groups for t in g} == {0, 1}  # both replicas took work
    assert [t.metadata["group_key"] for g in groups for t in g] == [[0, i] for i in range(6) for _ in range(3)]


@pytest.mark.slow
def test_back_pressure_bounds_groups_in_flight(pool):
    seen: list[list[int]] = []
    pool.run(_jobs(8, 2, step=1), on_result=lambda job, g: seen.append(pool.inflight()))
    assert seen and max(max(x) for x in seen) <= pool.max_in_flight
    assert pool.stats.submitted >= 8


@pytest.mark.slow
def test_killed_worker_groups_are_retried_once_and_nothing_is_lost(pool, policy):
    ray = pool._ray
    before = pool.stats.worker_deaths, pool.stats.resubmitted
    pids = {w["slot"]: w["pid"] for w in pool.worker_info()}
    killed: dict[str, int] = {}

    def kill_once(job, group):
        if killed:
            return
        busy = [i for i, n in enumerate(pool.inflight()) if n > 0]
        assert busy, "no worker had groups in flight: the kill would not be mid-run"
        victim = busy[0]
        killed.update(slot=victim, inflight=pool.inflight()[victim])
        ray.kill(pool.workers[victim])  # the real actor process dies, its running groups with it

    n, group = 10, 2
    # each tool call sleeps in the sandbox, so groups are still running when the first one returns
    groups = pool.run(_jobs(n, group, step=2, sleep_s=0.3), on_result=kill_once)

    assert killed and killed["inflight"] >= 1
    assert pool.stats.worker_deaths - before[0] == 1
    assert pool.stats.resubmitted - before[1] >= killed["inflight"]
    count = Counter((t.metadata["task_index"], t.metadata["episode_index"]) for g in groups for t in g)
    assert sorted(count) == [(i, e) for i in range(n) for e in range(group)]  # none lost
    assert set(count.values()) == {1}  # none duplicated
    assert [len(g) for g in groups] == [group] * n
    assert pool.stats.duplicates_dropped == 0
    # the victim's process is gone and its slot runs a fresh replacement
    gone = pids[killed["slot"]]
    deadline = time.monotonic() + 30
    while _alive(gone) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(gone)
    assert pool.worker_info()[killed["slot"]]["pid"] != gone
    # the retried groups were sampled with the seeds of the first attempt: a clean rerun gives the same
    rerun = pool.run(_jobs(n, group, step=3, sleep_s=0.0))
    assert [[t.response_ids for t in g] for g in groups] == [[t.response_ids for t in g] for g in rerun]


@pytest.mark.slow
def test_pushed_weights_reach_every_replica_and_stale_groups_are_refused(pool, policy):
    ray = pool._ray
    model, _ = policy
    base = _ids(pool.run(_jobs(4, 2, step=4)))
    original = {k: v.clone() for k, v in model.state_dict().items()}
    g = torch.Generator().manual_seed(0)
    noisy = {k: v + 0.5 * torch.randn(v.shape, generator=g) if v.is_floating_point() else v
             for k, v in original.items()}
    v1 = pool.push_weights(noisy)
    assert [w["version"] for w in pool.worker_info()] == [v1, v1]
    changed = _ids(pool.run(_jobs(4, 2, step=5)))
    assert changed != base
    pool.push_weights(original)
    assert _ids(pool.run(_jobs(4, 2, step=6))) == base
    with pytest.raises(StaleWeights):
        ray.get(pool.workers[0].run_group.remote(_jobs(1, 2, step=7)[0], v1))


def test_import_toolgym_does_not_import_ray():
    code = "import sys, toolgym, toolgym.distributed; assert 'ray' not in sys.modules, 'ray imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_a_worker_that_cannot_start_is_one_clear_error(ray_cluster, policy):
    from toolgym.distributed.driver import RolloutPoolError

    model, tok = policy
    with pytest.raises(RolloutPoolError, match="rollout worker 0 failed to start.*no_such_option"):
        RayRolloutPool(model, tok, num_workers=1, sandbox=None, sampler_kwargs={"no_such_option": 1})


def test_the_local_cluster_stays_on_loopback(ray_cluster):
    nodes = ray_cluster.nodes()
    assert nodes and {n["NodeManagerAddress"] for n in nodes} == {"127.0.0.1"}
