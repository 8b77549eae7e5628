"""The environment checker's named checks: one function per property of the reset/step contract, registered in
order in `CHECKS`, each given the `EnvUnderCheck` that holds one environment and plays for it what it needs (a
reset, an episode), so a check runs alone as well as in `toolgym.envs.checker.check_env`'s full run.

A check is ``fn(env) -> (ok, detail)`` registered with ``@env_check(NAME, TITLE)``; NAME is what ``--only`` and
`run_check` take, TITLE the line a report shows. Probes never need a sandbox to answer.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from toolgym._registry import Registry

PROBES: dict[str, str] = {
    "plain text": "I am not sure yet, let me think about it.",
    "malformed tool call": '<tool_call>{"name": "python", "arguments": {"code": </tool_call>',
    "unknown tool": '<tool_call>{"name": "no_such_tool_xyz", "arguments": {}}</tool_call>',
    "wrong argument type": '<tool_call>{"name": "python", "arguments": {"code": 12}}</tool_call>',
    "nested tags": "<tool_call><tool_call>{}</tool_call>",
    "unterminated tag": '<tool_call>{"name": "python"',
    "unicode": "答案是 \\boxed{٣} 🙂 \u202e\x00\ud800",
    "final answer": "The answer is \\boxed{0}.",
    "garbage": "",  # filled with a megabyte of seeded noise
}


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""


class NotChecked(Exception):
    """A check could not run because what it needs failed first (reset raised, no episode ended). `check_env`
    leaves such a check out (the earlier failure is already reported); run alone, it fails with the reason."""


class EnvUnderCheck:
    """One environment built by `make_env()` and shared by the checks of one run, so each check can also run
    alone: a check asks for what it needs (`first_reset()`, `ended_episode()`) and gets it, played now or
    earlier in the same run."""

    def __init__(self, make_env: Callable[[], Any], seed: int = 0, probes: dict[str, str] | None = None) -> None:
        self.make_env = make_env
        self.seed = seed
        self.probes = dict(PROBES if probes is None else probes)
        self.env = make_env()
        self._first: tuple[str, Any] | None = None
        self._episode: tuple[int, bool, str, int] | None = None  # (steps, done, problem, resets when played)
        self._resets = 0

    @property
    def reward_range(self) -> tuple[float, float]:
        lo, hi = getattr(self.env, "reward_range", (-math.inf, math.inf))
        return lo, hi

    @property
    def max_turns(self) -> int:
        return int(getattr(self.env, "max_turns", 50) or 50)

    def reset(self) -> Any:
        self._resets += 1
        return self.env.reset(seed=self.seed)

    def first_reset_output(self) -> Any:
        """What the first `reset(seed=seed)` returned (raises what it raised)."""
        if self._first is None:
            try:
                self._first = ("returned", self.reset())
            except Exception as exc:
                self._first = ("raised", exc)
        how, value = self._first
        if how == "raised":
            raise value
        return value

    def first_reset(self) -> tuple[Any, Any]:
        """The first reset's (obs, info); NotChecked when reset raised or returned something else."""
        try:
            out = self.first_reset_output()
        except Exception as exc:
            raise NotChecked(f"reset raised {type(exc).__name__}: {exc}") from None
        if not (isinstance(out, tuple) and len(out) == 2):
            raise NotChecked(f"reset returned {type(out).__name__}, not (obs, info)")
        return out

    def ended_episode(self) -> tuple[int, bool, str]:
        """Play one episode of unknown-tool calls from a reset, up to max_turns + 1 steps: (steps, whether
        it ended, the first contract problem). Played once; the env is left at its end."""
        if self._episode is None or self._episode[3] != self._resets:
            self.reset()
            lo, hi = self.reward_range
            steps, done, problem = 0, False, ""
            try:
                while not done and steps < self.max_turns + 1:
                    res = self.env.step('<tool_call>{"name": "no_such_tool_xyz", "arguments": {}}</tool_call>')
                    problem = _step_problem(res, lo, hi) or problem
                    done = bool(res[2] or res[3])
                    steps += 1
            except Exception as exc:
                problem = f"step raised {type(exc).__name__}: {exc}"
            self._episode = (steps, done, problem, self._resets)
        return self._episode[:3]

    def close(self) -> None:
        self.env.close()


@dataclass(frozen=True)
class EnvCheck:
    """One named property: `name` is what `--only` and `run_check` take, `title` the line `check_env` reports
    (and `Check.name`), `fn(env) -> (ok, detail)` the test, given the `EnvUnderCheck`."""

    name: str
    title: str
    fn: Callable[[EnvUnderCheck], tuple[bool, str]]

    def run(self, env: EnvUnderCheck) -> Check:
        """The check's result; a check that raises fails with what it raised; NotChecked propagates."""
        try:
            ok, detail = self.fn(env)
        except NotChecked:
            raise
        except Exception as exc:
            return Check(self.title, False, f"raised {type(exc).__name__}: {exc}")
        return Check(self.title, bool(ok), detail)


CHECKS: Registry[EnvCheck] = Registry("environment check", accepts=lambda obj: isinstance(obj, EnvCheck))
"""Every named check, in the order `check_env` runs them (the order matters only for speed: each check asks
`EnvUnderCheck` for what it needs)."""


def env_check(name: str, title: str) -> Callable[[Callable[[EnvUnderCheck], tuple[bool, str]]],
                                                 Callable[[EnvUnderCheck], tuple[bool, str]]]:
    """Register the decorated function as the check `name` (appended to `CHECKS`)."""

    def add(fn: Callable[[EnvUnderCheck], tuple[bool, str]]) -> Callable[[EnvUnderCheck], tuple[bool, str]]:
        CHECKS.add(name, EnvCheck(name, title, fn), override=False)
        return fn

    return add


@env_check("reward_range", "documents a finite reward range")
def check_reward_range(u: EnvUnderCheck) -> tuple[bool, str]:
    """`reward_range` is finite and ordered: the trainer normalizes and the docs promise rewards within it."""
    lo, hi = u.reward_range
    return math.isfinite(lo) and math.isfinite(hi) and lo <= hi, f"{(lo, hi)}"


@env_check("reset_returns", "reset returns (obs, info)")
def check_reset_returns(u: EnvUnderCheck) -> tuple[bool, str]:
    """`reset(seed=...)` returns a pair, as Gymnasium's does."""
    try:
        out = u.first_reset_output()
    except Exception as exc:
        return False, f"raised {type(exc).__name__}: {exc}"
    return isinstance(out, tuple) and len(out) == 2, type(out).__name__


@env_check("reset_obs", "reset obs is a list of chat messages")
def check_reset_obs(u: EnvUnderCheck) -> tuple[bool, str]:
    """The first observation is chat messages, inside the env's own observation space."""
    from toolgym.envs.spaces import Messages

    obs, _ = u.first_reset()
    space = getattr(u.env, "observation_space", None) or Messages()
    return Messages().contains(obs) and space.contains(obs), repr(obs)[:200]


@env_check("reset_info", "reset info has task_id and tools")
def check_reset_info(u: EnvUnderCheck) -> tuple[bool, str]:
    """`info` names the task (logs, partitions, suites) and lists the tools (the prompt renders them)."""
    _, info = u.first_reset()
    ok = isinstance(info, dict) and isinstance(info.get("task_id"), str) and isinstance(info.get("tools"), list)
    return ok, repr(info)[:200] if not isinstance(info, dict) else str(sorted(info))


@env_check("info_json", "reset info is JSON-serializable")
def check_info_json(u: EnvUnderCheck) -> tuple[bool, str]:
    """`info` goes to JSONL logs and across processes."""
    _, info = u.first_reset()
    err = _json_ok(info)
    return err is None, err or ""


@env_check("tool_schemas", "tool schemas are valid JSON Schema")
def check_tool_schemas(u: EnvUnderCheck) -> tuple[bool, str]:
    """Every tool in `info["tools"]` is an OpenAI-style function schema with a unique name; chat templates and
    servers reject anything else."""
    from toolgym.envs.tools import ToolSchemaError, check_parameters_schema

    _, info = u.first_reset()
    names: set[str] = set()
    problems = []
    for t in info.get("tools", []) if isinstance(info, dict) else []:
        try:
            fn = t["function"]
            if t.get("type") != "function" or not isinstance(fn.get("name"), str) or not isinstance(fn.get("description"), str):
                raise ToolSchemaError("needs type=function and a function name and description")
            check_parameters_schema(fn.get("parameters"), fn["name"])
            if fn["name"] in names:
                raise ToolSchemaError(f"duplicate tool name {fn['name']!r}")
            names.add(fn["name"])
        except (KeyError, TypeError, ToolSchemaError) as exc:
            problems.append(str(exc))
    return not problems, "; ".join(problems)


@env_check("reset_determinism", "reset is deterministic for a seed")
def check_reset_determinism(u: EnvUnderCheck) -> tuple[bool, str]:
    """Resetting again with the same seed gives the same obs and info (a seed must name a task)."""
    obs, info = u.first_reset()
    obs2, info2 = u.reset()
    return obs2 == obs and info2 == info, _difference(obs, info, obs2, info2)


@env_check("fresh_env_determinism", "a fresh env gives the same task for the seed")
def check_fresh_env_determinism(u: EnvUnderCheck) -> tuple[bool, str]:
    """A second env, built the same way, gives the same task for the seed (workers build their own)."""
    obs, info = u.first_reset()
    other = u.make_env()
    try:
        obs3, info3 = other.reset(seed=u.seed)
        return obs3 == obs and info3.get("task_id") == info.get("task_id"), _difference(obs, info, obs3, info3)
    finally:
        other.close()


@env_check("step_contract", "step contract on hostile and ordinary text")
def check_step_contract(u: EnvUnderCheck) -> tuple[bool, str]:
    """Each probe (`PROBES`: malformed and unknown tool calls, nested and unterminated tags, odd unicode, a
    megabyte of noise, plain text, a final answer), stepped after a reset, gives a well-formed 5-tuple with a
    reward within the range, and never raises: model text is hostile input."""
    u.first_reset()
    lo, hi = u.reward_range
    probes = dict(u.probes)
    if "garbage" in probes and not probes["garbage"]:
        probes["garbage"] = _garbage()
    failures = []
    for name, text in probes.items():
        u.reset()
        try:
            res = u.env.step(text)
        except Exception as exc:
            failures.append(f"{name}: raised {type(exc).__name__}: {exc}")
            continue
        problem = _step_problem(res, lo, hi)
        if problem:
            failures.append(f"{name}: {problem}")
    return not failures, "; ".join(failures)[:2000]


@env_check("episode_ends", "episodes end within max_turns")
def check_episode_ends(u: EnvUnderCheck) -> tuple[bool, str]:
    """A model that only calls an unknown tool still ends its episode within `max_turns` steps, each one
    keeping the step contract."""
    u.first_reset()
    steps, done, problem = u.ended_episode()
    return done and steps <= u.max_turns and not problem, problem or f"{steps} steps"


@env_check("step_after_end", "step after the end raises EnvStateError")
def check_step_after_end(u: EnvUnderCheck) -> tuple[bool, str]:
    """Stepping an ended episode is a bug in the caller: it raises EnvStateError rather than playing on."""
    from toolgym.envs.core import EnvStateError

    u.first_reset()
    steps, done, _ = u.ended_episode()
    if not done:
        raise NotChecked(f"no episode ended within {steps} steps")
    try:
        u.env.step("after the end")
    except EnvStateError:
        return True, ""
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"
    return False, "no error"


@env_check("close_idempotent", "close() is idempotent")
def check_close_idempotent(u: EnvUnderCheck) -> tuple[bool, str]:
    """`close()` twice is fine: a pool, a runner and a finally block may each close the same env."""
    try:
        u.close()
        u.close()
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"
    return True, ""


def _difference(obs: Any, info: Any, obs2: Any, info2: Any) -> str:
    """What differs between two resets under one seed ("" when nothing does)."""
    def task_id(i: Any) -> Any:
        return i.get("task_id") if isinstance(i, dict) else None

    if task_id(info) != task_id(info2):
        return f"task_id {task_id(info)!r}, then {task_id(info2)!r}"
    if obs != obs2:
        return "the same task_id with other messages"
    return "" if info == info2 else "the same messages with another info"


def _garbage(n: int = 1 << 20) -> str:
    import random

    rng = random.Random(0)
    pieces = ["<tool_call>", "</tool_call>", "{", "}", '"', "```python\n", "```", "\\boxed{", "<answer>", "<think>",
              "\n", "é", "\U0001f600", "\x00"]
    out, size = [], 0
    while size < n:
        p = rng.choice(pieces) if rng.random() < 0.3 else chr(rng.randint(32, 0x2FFF))
        out.append(p)
        size += len(p)
    return "".join(out)


def _json_ok(x: Any) -> str | None:
    try:
        json.dumps(x, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


def _step_problem(res: Any, lo: float, hi: float) -> str:
    from toolgym.envs.spaces import Messages

    if not (isinstance(res, tuple) and len(res) == 5):
        return "step must return (obs, reward, terminated, truncated, info)"
    obs, reward, term, trunc, info = res
    if not Messages().contains(obs):
        return f"obs is not a list of chat messages: {repr(obs)[:120]}"
    for m in obs:
        if m["role"] == "tool" and not m.get("tool_call_id"):
            return "tool message without tool_call_id"
    if not isinstance(reward, (int, float)) or isinstance(reward, bool) or not math.isfinite(reward):
        return f"reward {reward!r} is not a finite number"
    if not lo - 1e-9 <= reward <= hi + 1e-9:
        return f"reward {reward} outside the documented range {(lo, hi)}"
    if not isinstance(term, bool) or not isinstance(trunc, bool):
        return "terminated and truncated must be bools"
    err = _json_ok(info)
    if err:
        return f"info is not JSON-serializable: {err}"
    if (term or trunc) and "reward_components" not in info:
        return "the final step's info lacks reward_components"
    return ""
