"""The environment checker's named checks, one by one: each fails on a user's environment broken in exactly
that property (and `check_env` then reports that one failure alone), and passes on the README's environment
(examples/register_env.py); `--only NAME` runs one through the real CLI."""

from __future__ import annotations

import itertools
import json
import math
import os
import runpy
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import toolgym
from toolgym.envs import EnvStateError, GeneratorSource, Rubric, Task, ToolEnv, tool
from toolgym.envs.checker import CHECKS, Check, check_env, run_check
from toolgym.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


@tool
def shout(text: str) -> str:
    """Upper-case a string.

    Args:
        text: the string to upper-case.
    """
    return text.upper()


def word_task(i: int) -> Task:
    word = ["alpha", "bravo", "charlie", "delta", "echo"][i % 5]
    return Task(id=f"shout-{i}", ground_truth=word.upper(),
                prompt=[{"role": "user", "content": f"Shout '{word}'. Reply <answer>...</answer>."}])


def right(answer: str | None, task: Task) -> float:
    return float(answer == task.ground_truth)


class ShoutEnv(ToolEnv):
    """A user's environment that passes every check; each class below breaks one property of it."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("sandbox", None)
        super().__init__(GeneratorSource(word_task), tools=[shout], rubric=Rubric([right]), **kwargs)


class UnboundedReward(ShoutEnv):
    reward_range = (0.0, math.inf)  # documents no bound: a trainer cannot normalize by it


class ResetReturnsObsOnly(ShoutEnv):
    def reset(self, *, seed=None, options=None):
        return super().reset(seed=seed, options=options)[0]  # the pre-Gymnasium-0.26 shape


class ResetObsIsText(ShoutEnv):
    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return obs[-1]["content"], info  # a prompt string, not chat messages


class ResetInfoWithoutTaskId(ShoutEnv):
    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        info.pop("task_id")
        return obs, info


class ResetInfoWithASet(ShoutEnv):
    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        info["labels"] = {"easy"}  # equal on every reset, but JSON has no sets
        return obs, info


class ToolWithoutDescription(ShoutEnv):
    @property
    def tool_schemas(self):
        schema = json.loads(json.dumps(shout.schema))
        del schema["function"]["description"]
        return [schema]


class ResetCountsEpisodes(ShoutEnv):
    """The task depends on how often this env was reset: a fresh env agrees with another's first reset, but
    one env's second reset under the same seed gives another task."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.resets = 0

    def sample_task(self, options):
        self.resets += 1
        return word_task(self.resets)


_instances = itertools.count()


class TaskPerInstance(ShoutEnv):
    """The task depends on which instance this is: one env repeats itself, a second env disagrees."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.nth = next(_instances)

    def sample_task(self, options):
        return word_task(self.nth)


class CrashesOnNul(ShoutEnv):
    def step(self, action):
        if "\x00" in action:  # a parser bug on text models do write
            raise UnicodeError("NUL in the completion")
        return super().step(action)


class NeverEnds(ShoutEnv):
    def step(self, action):
        obs, reward, _, _, info = super().step(action)
        return obs, reward, False, False, info


class PlaysOnAfterTheEnd(ShoutEnv):
    def step(self, action):
        try:
            return super().step(action)
        except EnvStateError:
            return [], 0.0, True, False, {"reward_components": {}}


class ClosesOnce(ShoutEnv):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.closed = False

    def close(self):
        if self.closed:
            raise RuntimeError("already closed")
        self.closed = True
        super().close()


BROKEN: dict[str, type[ToolEnv]] = {
    "reward_range": UnboundedReward,
    "reset_returns": ResetReturnsObsOnly,
    "reset_obs": ResetObsIsText,
    "reset_info": ResetInfoWithoutTaskId,
    "info_json": ResetInfoWithASet,
    "tool_schemas": ToolWithoutDescription,
    "reset_determinism": ResetCountsEpisodes,
    "fresh_env_determinism": TaskPerInstance,
    "step_contract": CrashesOnNul,
    "episode_ends": NeverEnds,
    "step_after_end": PlaysOnAfterTheEnd,
    "close_idempotent": ClosesOnce,
}


def failed(checks: list[Check]) -> list[str]:
    return [c.name for c in checks if not c.ok]


@pytest.fixture(scope="module")
def readme_env():
    """The README's environment, registered by running examples/register_env.py as a user would import it."""
    runpy.run_path(str(ROOT / "examples" / "register_env.py"))
    return lambda: toolgym.make("myorg/Reverse-v0")


def test_every_named_check_has_an_env_that_breaks_it():
    assert list(BROKEN) == list(CHECKS)
    titles = [c.title for c in CHECKS.values()]
    assert len(set(titles)) == len(titles)


def test_the_unbroken_user_env_passes_every_check():
    checks = check_env(ShoutEnv)
    assert failed(checks) == [] and [c.name for c in checks] == [c.title for c in CHECKS.values()]


@pytest.mark.parametrize("name", list(BROKEN))
def test_a_named_check_fails_on_the_env_that_breaks_it_and_only_it_fails(name):
    title = CHECKS[name].title
    alone = run_check(name, BROKEN[name])
    assert alone.name == title and not alone.ok, alone
    assert not alone.detail.startswith("not checked"), alone  # it ran and found the fault
    assert failed(check_env(BROKEN[name])) == [title]


@pytest.mark.parametrize("name", list(CHECKS))
def test_a_named_check_passes_on_the_readme_env(name, readme_env):
    check = run_check(name, readme_env)
    assert check.ok and check.name == CHECKS[name].title, check


def test_check_env_on_the_readme_env_runs_every_check_in_order(readme_env):
    checks = check_env(readme_env)
    assert [c.name for c in checks] == [c.title for c in CHECKS.values()] and failed(checks) == []


def test_only_runs_the_named_checks_in_the_checkers_order():
    checks = check_env(TaskPerInstance, only=["step_contract", "fresh_env_determinism"])
    assert [c.name for c in checks] == [CHECKS["fresh_env_determinism"].title, CHECKS["step_contract"].title]
    assert failed(checks) == [CHECKS["fresh_env_determinism"].title]
    first = int(checks[0].detail.split("'shout-")[1].split("'")[0])
    assert checks[0].detail == f"task_id 'shout-{first}', then 'shout-{first + 1}'"


def test_a_check_whose_prerequisite_failed_says_why_when_run_alone():
    """In a full run a check that cannot run after a broken reset is left out (the reset's failure is the
    line to read); asked for by name, it fails and names the reason."""
    full = check_env(ResetReturnsObsOnly)
    assert [c.name for c in full] == [CHECKS[n].title for n in ("reward_range", "reset_returns", "close_idempotent")]
    alone = run_check("reset_determinism", ResetReturnsObsOnly)
    assert not alone.ok and alone.detail == "not checked: reset returned list, not (obs, info)"
    alone = run_check("step_after_end", NeverEnds)
    assert not alone.ok and alone.detail.startswith("not checked: no episode ended within")


def test_an_unknown_check_name_is_one_line_with_a_suggestion():
    with pytest.raises(ConfigError) as err:
        run_check("reset_determinsm", ShoutEnv)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("unknown environment check 'reset_determinsm'; did you mean 'reset_determinism'?")
    assert "close_idempotent" in msg


# ---------------------------------------------------------------------------------------- the real CLI
USER_MODULE = textwrap.dedent('''
    """A user's env module, named as `user_envs:user/Shout-v0` from its folder."""
    import toolgym
    from toolgym.envs import GeneratorSource, Rubric, Task, ToolEnv, tool


    @tool
    def shout(text: str) -> str:
        """Upper-case a string.

        Args:
            text: the string to upper-case.
        """
        return text.upper()


    def word_task(i):
        return Task(id=f"shout-{i}", ground_truth="X", prompt=[{"role": "user", "content": f"task {i}"}])


    class ShoutEnv(ToolEnv):
        def __init__(self, **kwargs):
            super().__init__(GeneratorSource(word_task), tools=[shout], rubric=Rubric([lambda answer: 0.0]),
                             **kwargs)


    class ResetCountsEpisodes(ShoutEnv):
        resets = 0

        def sample_task(self, options):
            self.resets += 1
            return word_task(self.resets)


    toolgym.register("user/Shout-v0", entry_point=ShoutEnv)
    toolgym.register("user/Drifting-v0", entry_point=ResetCountsEpisodes)
''')


def _toolgym(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    script = Path(sys.executable).parent / "toolgym"
    cmd = [str(script)] if script.exists() else [sys.executable, "-c", "from toolgym.cli import main; main()"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([*cmd, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_cli_only_runs_one_named_check(tmp_path):
    (tmp_path / "user_envs.py").write_text(USER_MODULE)
    title = CHECKS["reset_determinism"].title

    res = _toolgym(["envs", "check", "user_envs:user/Drifting-v0", "--only", "reset_determinism"], tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stdout.splitlines() == [f"FAIL {title} [--only reset_determinism]: task_id 'shout-1', then 'shout-2'",
                                       "user_envs:user/Drifting-v0: 0/1 checks passed"]

    res = _toolgym(["envs", "check", "user_envs:user/Shout-v0", "--only", "reset_determinism", "--only",
                    "tool_schemas", "--json"], tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert out["ok"] and [c["name"] for c in out["checks"]] == [CHECKS["tool_schemas"].title, title]

    res = _toolgym(["envs", "check", "user_envs:user/Shout-v0", "--only", "reset_determinsm"], tmp_path)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.splitlines() == [res.stderr.strip()] and "Traceback" not in res.stderr
    assert res.stderr.startswith("error: unknown environment check 'reset_determinsm'; "
                                 "did you mean 'reset_determinism'?")
