"""A user trains one policy on two environments at once, from a fresh folder through the CLI: the built-in
Arith and their own environment, a `module:id` in a .py file beside the config (``rollout.envs``). Once in the
trainer's process and once with a rollout worker sampling one step ahead: every step's metrics are split per
environment and add up, no group mixes environments, every saved trajectory names its environment, the
evaluation covers each environment's held-out tasks, and both runs drew the same tasks for the same slots
(the draw is the config's and the step's, not the process's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.journeys.user import User, readme_block
from toolgym.training.outputs.logging import read_metrics

from ..training.trainer_util import tiny_config

NAMES = ("toolgym/Arith-v0", "myorg/Reverse-v0")

def _config(home: Path, name: str, **rollout) -> Path:
    cfg = tiny_config(Path(name), steps=3)
    arith = cfg["rollout"].pop("env_kwargs")
    del cfg["rollout"]["env"]
    cfg["rollout"].update(envs=[{"env": "toolgym/Arith-v0", "weight": 1, "env_kwargs": arith},
                                {"env": "my_env:myorg/Reverse-v0", "weight": 1}],
                          prompts_per_step=4, sandbox=None, **rollout)
    cfg["logging"]["save_rollouts"] = True
    cfg["checkpoint"] = {"every": 0}
    path = home / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _rollouts(run: Path, step: int) -> list[list[dict]]:
    """The step's saved groups, in slot order."""
    lines = (run / "rollouts" / f"step-{step:04d}.jsonl").read_text().splitlines()
    groups: dict[str, list[dict]] = {}
    for line in lines:
        t = json.loads(line)
        if "group_id" in t:
            groups.setdefault(t["group_id"], []).append(t)
    return list(groups.values())


def _check_run(run: Path) -> list[list[tuple[str, str]]]:
    """The run's per-environment records hold together; returns each step's (env, task id) per slot."""
    train = read_metrics(run, "train")
    assert [r["step"] for r in train] == [1, 2, 3]
    for r in train:
        per_env = [r[f"episodes/{n}"] for n in NAMES]
        assert sum(per_env) == r["episodes"] == 8, r
        reward = sum(r[f"reward_mean/{n}"] * r[f"episodes/{n}"] for n in NAMES if r[f"episodes/{n}"])
        assert reward / r["episodes"] == pytest.approx(r["reward_mean"]), r
    (ev,) = read_metrics(run, "eval")
    assert all(ev[f"episodes/{n}"] == 2 for n in NAMES) and ev["episodes"] == 4, ev  # eval.tasks of each env
    slots = []
    for step in (1, 2, 3):
        groups = _rollouts(run, step)
        assert len(groups) == 4
        step_slots = []
        for g in groups:
            envs = {t["metadata"]["env"] for t in g}
            assert len(envs) == 1 and envs <= set(NAMES), envs  # a group never mixes environments
            (env,) = envs
            # the task is one of that environment's: the user's tasks are its own ids
            assert all(t["task_id"].startswith("reverse-") == (env == "myorg/Reverse-v0") for t in g), g[0]["task_id"]
            step_slots.append((env, g[0]["task_id"]))
        slots.append(step_slots)
    meta = json.loads((run / "rollouts" / "step-0001.jsonl.meta.json").read_text())["meta"]
    assert [e["name"] for e in meta["envs"]] == list(NAMES)
    return slots


@pytest.mark.slow
def test_a_mixture_of_arith_and_a_users_env_trains_per_env_in_process_and_on_a_worker(tmp_path):
    user = User(tmp_path / "home")
    user.write("my_env.py", readme_block("Register an environment"))  # the README's environment, as a user's file
    here = user.run("toolgym", "train", str(_config(user.home, "here")), "--no-progress")
    assert "on toolgym/Arith-v0 + myorg/Reverse-v0" in here.stdout
    assert "2 held-out tasks of each of 2 environments" in here.stdout
    user.run("toolgym", "train", str(_config(user.home, "worker", workers=1, max_staleness=1)), "--no-progress")
    a, b = _check_run(user.home / "here"), _check_run(user.home / "worker")
    assert a == b  # the same environment and task in every slot of every step, wherever it was sampled
    drawn = [env for step in a for env, _ in step]
    assert set(drawn) == set(NAMES)
    assert drawn.count(NAMES[0]) == drawn.count(NAMES[1]) == 6  # equal weights, 4 slots: two each per step
