"""Rollout worker processes on this machine: the same groups as one process, a user's hung reward function
fails only its own group (and never runs in the trainer's process), a killed worker's groups are retried,
every token records the pushed weights' version, and no worker outlives a trainer killed with kill -9."""

from __future__ import annotations

import asyncio
import copy
import math
import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from toolgym.agents.chat import ChatTemplate
from toolgym.agents.hf_sampler import HFSampler
from toolgym.agents.runner import EpisodeLimits, RolloutRunner, TaskSpec
from toolgym.agents.sampling import SamplingParams
from toolgym.distributed.driver import GroupJob, RolloutPoolError
from toolgym.distributed.local_pool import LocalRolloutPool
from toolgym.training.algorithms.base import scored_rewards
from toolgym.training.model.demo import build_demo
from toolgym.training.trainer import trajectory_stats

PARAMS = SamplingParams(temperature=1.0, max_tokens=12)
LIMITS = EpisodeLimits(max_turns=3, max_total_tokens=256)
SEED = 11
ARITH = "toolgym/Arith-v0"
NO_SANDBOX = {"sandbox": None}  # a code block then fails as a tool error, the same way in both runs
# one row per forward pass and no prefix reuse: equal episodes are then equal bit for bit (test_ray_rollouts)
ONE_ROW = {"max_batch_size": 1, "prefix_cache_mb": 0}
DEADLINE_S = 4.0  # an honest group here takes well under a second
USER_MODULE = "toolgym_test_user_hang_env"
USER_ENV = f"{USER_MODULE}:testorg/Hang-v0"
BAD = 2  # the task whose reward function never returns
HANG_AT_RESET = 9  # the task whose construction never returns

USER_ENV_SOURCE = f'''
import re
import toolgym
from toolgym.envs import GeneratorSource, Rubric, Task, ToolEnv


def make_task(i):
    if i == {HANG_AT_RESET}:  # this task never gets built
        re.match(r"(a+)+$", "a" * 64 + "!")
    return Task(id=f"hang-{{i}}", ground_truth="hang" if i == {BAD} else str(i),
                prompt=[{{"role": "user", "content": f"Say {{i}}. Reply <answer>...</answer>."}}])


def correct(answer, task):
    if task.ground_truth == "hang":  # backtracks for ever inside the regex engine, holding the interpreter lock
        re.match(r"(a+)+$", "a" * 64 + "!")
    return float(answer == task.ground_truth)


class HangEnv(ToolEnv):
    def __init__(self, **kwargs):
        # isolate=False: on a thread of the episode's process, as a closure or a function taking `state` is
        super().__init__(GeneratorSource(make_task), tools=[], rubric=Rubric([correct], isolate=False), **kwargs)


toolgym.register("testorg/Hang-v0", entry_point=HangEnv)
'''


@pytest.fixture(scope="module")
def policy():
    corpus = ["Compute 12 * 34 with python.", "```python\nprint(12 * 34)\n```", "Answer: 408"] * 40
    return build_demo(corpus, None, vocab_size=300, layers=1, hidden=32, heads=2, intermediate=64,
                      max_positions=256, seed=0)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A folder holding the user's environment module, the current folder while the pool lives (the workers
    import `module:id` environments from it, as `toolgym` does from the folder it runs in)."""
    d = tmp_path_factory.mktemp("userenv")
    (d / f"{USER_MODULE}.py").write_text(USER_ENV_SOURCE)
    before = os.getcwd()
    os.chdir(d)
    yield d
    os.chdir(before)


@pytest.fixture(scope="module")
def pool(policy, workdir):
    model, tok = policy
    with LocalRolloutPool(model, tok, num_workers=2, threads=1, sandbox=None, max_in_flight=2,
                          group_deadline_s=DEADLINE_S, sampler_kwargs=ONE_ROW) as p:
        yield p


def _arith_jobs(n: int, group: int, step: int = 0) -> list[GroupJob]:
    return [GroupJob(key=(step, i), task_index=i, spec=TaskSpec(seed=100 + i), group_size=group, env=ARITH,
                     env_kwargs=NO_SANDBOX, params=PARAMS, limits=LIMITS, seed=SEED) for i in range(n)]


def _in_process(model, tok, n: int, group: int) -> list[list]:
    torch.set_num_threads(1)  # as each worker (threads=1): same numerics
    runner = RolloutRunner(HFSampler(model, tok, **ONE_ROW), ChatTemplate(tok), ARITH, PARAMS, LIMITS,
                           env_kwargs=NO_SANDBOX, seed=SEED)
    return asyncio.run(runner.arun([TaskSpec(seed=100 + i) for i in range(n)], group))


@pytest.fixture(scope="module")
def reference(policy):
    model, tok = policy
    return _in_process(model, tok, 6, 2)


FIELDS = ("task_id", "prompt_ids", "response_ids", "loss_mask", "behavior_logprobs", "reward", "finish_reason")


def _ids(groups):
    return [[tuple(getattr(t, f) for f in FIELDS) for t in g] for g in groups]


def _same(groups, expected) -> None:
    """Equal groups; a difference names its group, episode and field (with the trajectory's error)."""
    assert len(groups) == len(expected)
    for i, (g, e) in enumerate(zip(groups, expected, strict=True)):
        assert len(g) == len(e), f"group {i}"
        for j, (t, u) in enumerate(zip(g, e, strict=True)):
            for f in FIELDS:
                assert getattr(t, f) == getattr(u, f), (f"group {i} episode {j}: {f} differs "
                                                        f"({t.finish_reason}/{u.finish_reason}, {t.error}/{u.error})")


@pytest.mark.slow
def test_groups_equal_the_in_process_runner_in_job_order(pool, reference, one_torch_thread):
    groups = pool.run(_arith_jobs(6, 2))
    _same(groups, reference)
    assert any(t.num_model_tokens > 0 for g in groups for t in g)
    assert [t.metadata["group_key"] for g in groups for t in g] == [[0, i] for i in range(6) for _ in range(2)]
    assert {t.metadata["worker"] for g in groups for t in g} == {0, 1}  # both processes took work
    assert all(p is not None and p != os.getpid() for p in pool.pids())


@pytest.mark.slow
def test_a_hung_user_reward_function_fails_only_its_group(pool):
    def jobs(indices):
        return [GroupJob(key=(1, i), task_index=i, spec=TaskSpec(options={"index": i}), group_size=2,
                         env=USER_ENV, env_kwargs=NO_SANDBOX, params=PARAMS, limits=LIMITS, seed=SEED)
                for i in indices]

    good = [i for i in range(5) if i != BAD]
    clean = pool.run(jobs(good))  # a run without the bad task
    assert all(t.finish_reason != "worker_timeout" for g in clean for t in g)
    assert {t.task_id for g in clean for t in g} == {f"hang-{i}" for i in good}  # the user's env ran
    kills, failed = pool.stats.deadline_kills, pool.stats.groups_failed
    groups = pool.run(jobs(range(5)))
    bad = groups[BAD]
    assert [t.finish_reason for t in bad] == ["worker_timeout"] * 2
    assert all(t.reward == 0.0 and t.error and "\n" not in t.error and "deadline" in t.error for t in bad)
    assert trajectory_stats(bad)["infra_failures"] == 2  # counted, and left out of training:
    assert all(math.isnan(r) for r in scored_rewards(bad)[0])
    assert pool.stats.groups_failed - failed == 1
    assert 1 <= pool.stats.deadline_kills - kills <= 2  # 2: it shared its worker, then ran alone
    # every other group is what the run without the bad task gave (groups on a killed worker were resubmitted)
    _same([groups[i] for i in good], clean)
    assert USER_MODULE not in sys.modules  # ... in the workers only


@pytest.mark.slow
def test_a_group_that_hangs_beside_others_runs_again_alone_before_it_fails(pool):
    """Jobs go out in order to the least busy worker: the hanging group (first) and the third share worker 0,
    which freezes at once. Both pass the deadline there; neither is to blame yet. The third runs again and
    succeeds; the hanging one runs again alone, passes the deadline alone, and fails."""
    order = [HANG_AT_RESET, 0, 1, 3]
    jobs = [GroupJob(key=(9, i), task_index=i, spec=TaskSpec(options={"index": i}), group_size=2, env=USER_ENV,
                     env_kwargs=NO_SANDBOX, params=PARAMS, limits=LIMITS, seed=SEED) for i in order]
    pool.wait_ready()  # both workers up (a replacement from an earlier test may still be loading)
    kills, failed = pool.stats.deadline_kills, pool.stats.groups_failed
    groups = pool.run(jobs)
    assert [t.finish_reason for t in groups[0]] == ["worker_timeout"] * 2
    assert all(t.finish_reason != "worker_timeout" for g in groups[1:] for t in g)
    assert (pool.stats.deadline_kills - kills, pool.stats.groups_failed - failed) == (2, 1)


@pytest.mark.slow
def test_a_worker_killed_mid_run_has_its_groups_retried(pool, reference, one_torch_thread):
    deaths, resubmitted = pool.stats.worker_deaths, pool.stats.resubmitted
    killed: list[int] = []

    def kill_busiest(job, group):
        if not killed:
            busy = pool.inflight()
            slot = max(range(len(busy)), key=lambda i: busy[i])
            if busy[slot]:
                killed.append(busy[slot])
                os.kill(pool.pids()[slot], signal.SIGKILL)

    groups = pool.run(_arith_jobs(6, 2, step=2), on_result=kill_busiest)
    assert killed, "no worker had a group in flight after the first result"
    _same(groups, reference)
    assert pool.stats.worker_deaths - deaths == 1
    assert pool.stats.resubmitted - resubmitted >= killed[0]  # and any sent to it before its death was seen


@pytest.mark.slow
def test_tokens_record_the_pushed_version_and_new_weights_take_effect(pool, policy, reference, one_torch_thread):
    model, tok = policy
    noisy = copy.deepcopy(model)
    with torch.no_grad():
        for p in noisy.parameters():
            p.add_(0.5 * torch.randn_like(p))
    try:
        assert pool.push_weights(noisy.state_dict(), version=7) == 7 and pool.version == 7
        groups = pool.run(_arith_jobs(6, 2, step=3))
        assert _ids(groups) == _ids(_in_process(noisy, tok, 6, 2)) != _ids(reference)
        assert all(t.token_versions == [7] * len(t.response_ids) and t.metadata["weights_version"] == 7
                   for g in groups for t in g)
        assert [w["version"] for w in pool.worker_info()] == [7, 7]
    finally:
        assert pool.push_weights(model.state_dict()) == 8  # None: the next version
    groups = pool.run(_arith_jobs(6, 2, step=4))
    _same(groups, reference)
    assert {v for g in groups for t in g for v in t.token_versions} == {8}


@pytest.mark.slow
def test_weights_pushed_while_groups_run(pool, policy, reference, one_torch_thread):
    """From the run's own callback (deterministic: groups sent after it sample the new version) and from another
    thread while ``run`` waits (the trainer's side of an asynchronous pipeline)."""
    model, tok = policy
    old = pool.version
    sent_before: list[int] = []

    def push_on_first(job, group):
        if not sent_before:
            sent_before.append(pool.stats.submitted)
            assert pool.push_weights(model.state_dict(), version=old + 1) == old + 1

    submitted = pool.stats.submitted
    groups = pool.run(_arith_jobs(6, 2, step=5), on_result=push_on_first)
    _same(groups, reference)  # the same weights, pushed again: the same episodes
    n_before = sent_before[0] - submitted  # groups already sent when the push happened
    assert n_before <= 4  # two workers, two groups each
    for i, g in enumerate(groups):
        for t in g:
            assert t.token_versions and t.token_versions == sorted(t.token_versions)  # never goes back
            assert set(t.token_versions) <= {old, old + 1}
            assert t.metadata["weights_version"] == t.token_versions[0]
            if i >= n_before:  # sent after the push (jobs go out in order)
                assert set(t.token_versions) == {old + 1}

    first = threading.Event()
    box: dict[str, Any] = {}

    def background():
        try:
            box["groups"] = pool.run(_arith_jobs(6, 2, step=6), on_result=lambda j, g: first.set())
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            box["error"] = exc
        first.set()

    th = threading.Thread(target=background)
    th.start()
    first.wait(60)
    assert pool.push_weights(model.state_dict(), version=old + 2) == old + 2
    th.join(60)
    assert not th.is_alive() and "error" not in box
    _same(box["groups"], reference)
    assert {v for g in box["groups"] for t in g for v in t.token_versions} <= {old + 1, old + 2}


@pytest.mark.slow
def test_a_run_that_raises_leaves_the_pool_usable(pool, reference, one_torch_thread):
    def stop(job, group):
        raise KeyboardInterrupt  # Ctrl-C in the trainer while groups are out

    with pytest.raises(KeyboardInterrupt):
        pool.run(_arith_jobs(6, 2, step=7), on_result=stop)
    groups = pool.run(_arith_jobs(6, 2, step=8))  # the groups left out finish, and nobody takes them for these
    _same(groups, reference)
    assert [t.metadata["group_key"] for g in groups for t in g] == [[8, i] for i in range(6) for _ in range(2)]


@pytest.mark.slow
def test_an_env_that_cannot_reach_a_worker_is_one_line(pool):
    job = GroupJob(key=(10, 0), task_index=0, spec=TaskSpec(seed=1), group_size=1,
                   env=lambda **kw: None, params=PARAMS, limits=LIMITS)
    with pytest.raises(RolloutPoolError, match="cannot be sent to a worker process .*registered id") as e:
        pool.run([job])
    assert "\n" not in str(e.value)


@pytest.mark.slow
def test_a_worker_that_cannot_start_is_one_line(policy):
    model, tok = policy
    with pytest.raises(RolloutPoolError, match=r"^rollout worker 0 failed to start: ValueError: batching must be") as e:
        LocalRolloutPool(model, tok, num_workers=1, sandbox=None, sampler_kwargs={"batching": "bogus"})
    assert "\n" not in str(e.value)


ORPHAN_SCRIPT = textwrap.dedent('''
    import sys, time
    from toolgym.distributed.local_pool import LocalRolloutPool
    from toolgym.training.model.demo import build_demo

    if __name__ == "__main__":
        model, tok = build_demo(["a b c 1 2 3"] * 20, None, vocab_size=280, layers=1, hidden=16, heads=2,
                                intermediate=32, max_positions=64, seed=0)
        pool = LocalRolloutPool(model, tok, num_workers=1, sandbox=None)
        print(" ".join(str(p) for p in pool.pids()), flush=True)
        time.sleep(600)
''')


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@pytest.mark.slow
def test_no_worker_outlives_a_trainer_killed_with_sigkill(tmp_path):
    script = tmp_path / "trainer.py"
    script.write_text(ORPHAN_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        assert ready, "the pool did not start"
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 1 and all(_alive(p) for p in pids)
        os.kill(pids[0], signal.SIGINT)  # Ctrl-C reaches the whole group; the trainer, not a worker, handles it
        time.sleep(1.0)
        assert _alive(pids[0])
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        end = time.monotonic() + 10
        while any(_alive(p) for p in pids) and time.monotonic() < end:
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids)
    finally:
        proc.kill()
        proc.wait()
