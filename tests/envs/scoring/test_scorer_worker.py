"""Third-party scorers run in a child worker, never in the trainer (round-7 red team, z01).

reasoning-gym's coin_flip scorer turns the answer into a `Fraction`: '1e-7000000' computes
10**7000000 in one C call that holds the GIL for seconds. In the trainer's process nothing else
ran meanwhile (the event loop, other episodes' rewards); in the worker the call is killed past its
deadline, the answer scores 0 with a note, and the next answer is scored by a fresh child.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from fractions import Fraction

import pytest

from tests.envs.scoring.test_guard import _episode as guarded_episode
from toolgym.envs.rubric import Rubric
from toolgym.envs.scoring.scorer_worker import MEMORY_BYTES, worker
from toolgym.envs.tasks import reasoning_gym as rg
from toolgym.envs.tasks.reasoning_gym import ReasoningGymEnv, get_dataset, rg_reward, rg_source

ATTACK = "1e-7000000"
CONSTANT_PAYERS = {"coin_flip": "0", "game_of_life_halting": "0"}  # round-9 red team r907, and the probe that finds each


def _coin_flip_task(not_near: float = 0.0):
    """A coin_flip task whose reference answer is far from `not_near` (an attack's 0 is then wrong)."""
    src = rg_source("coin_flip", 0, constant_answers="allow")  # its scorer pays "0" (see the test below)
    for i in range(50):
        task = src.get(i)
        if abs(float(Fraction(task.ground_truth)) - not_near) > 0.1:
            return task
    raise AssertionError("no coin_flip task far from 0")


def _episode(name: str, text: str, index: int) -> tuple[float, dict]:
    return guarded_episode(name, text, index, constant_answers="allow" if name in CONSTANT_PAYERS else "refuse")


@pytest.mark.slow
def test_a_scorer_holding_the_gil_stalls_no_other_episode(monkeypatch):
    monkeypatch.setattr(rg, "SCORE_DEADLINE_S", 1.5)
    task = _coin_flip_task()
    rubric = Rubric([rg_reward], sync_timeout_s=10.0)
    assert rubric.score(answer=task.ground_truth, completion="", task=task).total == 1.0  # the worker is warm
    kills = worker().kills
    gaps: list[float] = []

    async def heartbeat(stop: asyncio.Event) -> None:
        last = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(0.02)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    async def main():
        stop = asyncio.Event()
        beat = asyncio.ensure_future(heartbeat(stop))
        began = time.monotonic()
        attack = asyncio.ensure_future(rubric.ascore(answer=ATTACK, completion="", task=task))
        await asyncio.sleep(0.2)  # the attack's scorer is running now
        honest = await rubric.ascore(answer=task.ground_truth, completion="", task=task)
        attacked = await attack
        stop.set()
        await beat
        return attacked, honest, time.monotonic() - began

    attacked, honest, took = asyncio.run(main())
    assert max(gaps) < 1.0, f"the event loop stalled for {max(gaps):.2f} s"
    assert honest.total == 1.0 and not honest.errors
    assert attacked.total == 0.0 and "ScorerTimeout" in attacked.errors["rg_reward"]
    assert took < 60.0
    assert worker().kills == kills + 1


@pytest.mark.slow
def test_the_worker_restarts_after_a_kill_and_scores_the_next_answer(monkeypatch):
    monkeypatch.setattr(rg, "SCORE_DEADLINE_S", 1.0)
    task = _coin_flip_task()
    assert rg_reward(task.ground_truth, "", task) == 1.0
    first = worker()._proc
    began = time.monotonic()
    with pytest.raises(TimeoutError, match="deadline"):
        rg_reward(ATTACK, "", task)
    assert time.monotonic() - began < 30.0
    assert first.poll() is not None  # killed
    assert rg_reward(task.ground_truth, "", task) == 1.0
    assert worker()._proc is not first and worker()._proc.poll() is None
    worker()._proc.kill()  # a child that died between answers is replaced too
    worker()._proc.wait()
    assert rg_reward(task.ground_truth, "", task) == 1.0


def test_the_child_has_memory_and_cpu_limits():
    task = _coin_flip_task()
    assert rg_reward(task.ground_truth, "", task) == 1.0
    with open(f"/proc/{worker()._proc.pid}/limits") as fh:
        limits = {line[:26].strip(): line[26:].split() for line in fh if line.startswith("Max")}
    assert int(limits["Max address space"][0]) == MEMORY_BYTES
    assert limits["Max cpu time"][0] != "unlimited"


def test_a_scorer_that_writes_a_file_is_refused_in_the_child(tmp_path, monkeypatch):
    mark = tmp_path / "written-by-the-answer"
    payload = f"<answer>open({str(mark)!r}, 'w').write('x')</answer>"
    # the trainer's own copy of the scorer is never called: the worker scores with its own
    monkeypatch.setattr(type(get_dataset("n_queens", 0)), "score_answer", lambda self, answer, entry: 1.0)
    reward, info = _episode("n_queens", payload, index=3)
    assert reward == 0.0
    assert not mark.exists()
    assert "ScorerRefused" in info["reward_errors"]["rg_reward"]


@pytest.mark.parametrize("dataset", ["basic_arithmetic", "coin_flip", "letter_counting", "spell_backward", "n_queens"])
def test_answers_that_score_one_still_score_one(dataset):
    ds = get_dataset(dataset, 0)
    for index in range(3):
        reward, info = _episode(dataset, f"<answer>{ds[index]['answer']}</answer>", index=index)
        assert reward == 1.0, (index, info.get("reward_errors"))


@pytest.mark.slow
def test_the_worker_starts_on_first_use_and_never_imports_the_callers_main(tmp_path):
    marks = tmp_path / "main-ran"
    script = tmp_path / "trainer.py"
    script.write_text(textwrap.dedent(f"""
        import os
        with open({str(marks)!r}, "a") as fh:
            fh.write(str(os.getpid()) + "\\n")
        import toolgym, toolgym.envs.tasks.reasoning_gym, toolgym.envs.scoring.scorer_worker as w
        assert w._WORKER is None, "a worker at import"
        from toolgym.envs.tasks.reasoning_gym import rg_reward, rg_source
        task = rg_source("basic_arithmetic", 0).get(0)
        assert rg_reward(task.ground_truth, "", task) == 1.0
        assert w.worker()._proc.poll() is None
    """))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(marks.read_text().splitlines()) == 1


@pytest.mark.parametrize("dataset", sorted(CONSTANT_PAYERS))
def test_a_dataset_whose_scorer_pays_a_constant_answer_is_refused(dataset):
    """Round-9 red team r907: coin_flip's scorer paid "0" full reward on 186 of 200 tasks, game_of_life_halting
    any non-empty answer on all: a policy learns the constant. Such a dataset is refused when it is first used,
    with the answer that pays; `constant_answers="allow"` takes it anyway."""
    from toolgym.errors import ConfigError

    with pytest.raises(ConfigError, match=f"gives full reward to the answer '{CONSTANT_PAYERS[dataset]}'"):
        ReasoningGymEnv(dataset, sandbox=None)
    env = ReasoningGymEnv(dataset, sandbox=None, constant_answers="allow")
    env.close()


@pytest.mark.parametrize("dataset", ["basic_arithmetic", "letter_counting", "spell_backward", "n_queens"])
def test_datasets_whose_scorers_pay_only_the_answer_are_taken(dataset):
    ReasoningGymEnv(dataset, sandbox=None).close()


@pytest.mark.slow
def test_a_child_that_answers_left_large_is_replaced_before_the_next_answer():
    """Round-9 red team r902: math-verify (and sympy's caches) keep ~130 MiB after an answer like 2^{2^{28}};
    40 of them filled the child's address space and every later comparison met MemoryError, which
    math-verify takes for "not equal" (an honest answer scored 0 with no error). A child a call left over its
    resident mark is replaced before the next call."""
    from toolgym.envs.scoring.scorer_worker import ScorerWorker

    w = ScorerWorker(recycle_bytes=100 << 20)  # the child starts near 60 MiB; one 2^{2^{27}} leaves 145-190 MiB
    try:
        w.call("toolgym.envs.verifiers:_mv_load", [], deadline_s=120.0)
        first = w._proc.pid
        assert w.call("toolgym.envs.verifiers:_mv_compare", ["2", "2^{2^{27}}", 5], deadline_s=60.0) is False
        assert w.recycled == 1 and w.kills == 0 and w._proc is None  # the answer's reply stood; the child went
        assert w.call("toolgym.envs.verifiers:_mv_compare", ["x/2", "\\frac{x}{2}", 5], deadline_s=60.0) is True
        assert w._proc.pid != first and w.recycled == 1  # a small answer leaves the fresh child in place
    finally:
        w.close()
