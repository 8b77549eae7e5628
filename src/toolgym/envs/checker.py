"""Environment checker behind `toolgym envs check ID`: the reset/step contract, determinism per
seed, JSON-serializable info, valid JSON-Schema tool schemas, rewards within the documented
range, and robustness to hostile model text. Probes never need a sandbox to answer.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

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


def check_env(make_env: Callable[[], Any], seed: int = 0, probes: dict[str, str] | None = None) -> list[Check]:
    """Run every check on environments built by `make_env()`; returns one Check per property."""
    from toolgym.envs.core import EnvStateError
    from toolgym.envs.spaces import Messages
    from toolgym.envs.tools import ToolSchemaError, check_parameters_schema

    checks: list[Check] = []

    def add(name: str, ok: bool, detail: str = "") -> None:
        checks.append(Check(name, bool(ok), detail))

    env = make_env()
    try:
        lo, hi = getattr(env, "reward_range", (-math.inf, math.inf))
        add("documents a finite reward range", math.isfinite(lo) and math.isfinite(hi) and lo <= hi, f"{(lo, hi)}")
        try:
            out = env.reset(seed=seed)
        except Exception as exc:
            add("reset returns (obs, info)", False, f"raised {type(exc).__name__}: {exc}")
            return checks
        ok = isinstance(out, tuple) and len(out) == 2
        add("reset returns (obs, info)", ok, type(out).__name__)
        if not ok:
            return checks
        obs, info = out
        space = getattr(env, "observation_space", None) or Messages()
        add("reset obs is a list of chat messages", Messages().contains(obs) and space.contains(obs), repr(obs)[:200])
        add("reset info has task_id and tools", isinstance(info, dict) and isinstance(info.get("task_id"), str)
            and isinstance(info.get("tools"), list), repr(info)[:200] if not isinstance(info, dict) else str(sorted(info)))
        err = _json_ok(info)
        add("reset info is JSON-serializable", err is None, err or "")
        names = set()
        schema_problems = []
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
                schema_problems.append(str(exc))
        add("tool schemas are valid JSON Schema", not schema_problems, "; ".join(schema_problems))

        obs2, info2 = env.reset(seed=seed)
        add("reset is deterministic for a seed", obs2 == obs and info2 == info)
        other = make_env()
        try:
            obs3, info3 = other.reset(seed=seed)
            add("a fresh env gives the same task for the seed", obs3 == obs and info3.get("task_id") == info.get("task_id"))
        finally:
            other.close()

        probes = dict(probes or PROBES)
        if "garbage" in probes and not probes["garbage"]:
            probes["garbage"] = _garbage()
        failures = []
        for name, text in probes.items():
            env.reset(seed=seed)
            try:
                res = env.step(text)
            except Exception as exc:
                failures.append(f"{name}: raised {type(exc).__name__}: {exc}")
                continue
            problem = _step_problem(res, lo, hi)
            if problem:
                failures.append(f"{name}: {problem}")
        add("step contract on hostile and ordinary text", not failures, "; ".join(failures)[:2000])

        env.reset(seed=seed)
        steps, done, problem = 0, False, ""
        max_turns = int(getattr(env, "max_turns", 50) or 50)
        try:
            while not done and steps < max_turns + 1:
                res = env.step('<tool_call>{"name": "no_such_tool_xyz", "arguments": {}}</tool_call>')
                problem = _step_problem(res, lo, hi) or problem
                done = bool(res[2] or res[3])
                steps += 1
        except Exception as exc:
            problem = f"step raised {type(exc).__name__}: {exc}"
        add("episodes end within max_turns", done and steps <= max_turns and not problem, problem or f"{steps} steps")
        if not done:
            return checks
        try:
            env.step("after the end")
            add("step after the end raises EnvStateError", False, "no error")
        except EnvStateError:
            add("step after the end raises EnvStateError", True)
        except Exception as exc:
            add("step after the end raises EnvStateError", False, f"{type(exc).__name__}: {exc}")
    finally:
        try:
            env.close()
            env.close()
            add("close() is idempotent", True)
        except Exception as exc:
            add("close() is idempotent", False, f"{type(exc).__name__}: {exc}")
    return checks


def run_builds(env_id: str, env_kwargs: dict[str, Any] | None = None) -> dict[str, Callable[[], Any]]:
    """Factories that build `env_id` exactly as each part of a run does (all through `registry.make_env`):
    training rollouts on the train partition with a sandbox (trainer, runner, Ray workers), held-out
    evaluation on the test partition, SFT prompts without a sandbox, and a suite entry that hands the env its
    own tasks with a seed. `toolgym envs check` runs every check on the first of them."""
    from toolgym.envs.registry import make_env

    kw = dict(env_kwargs or {})
    return {
        "training rollouts (partition='train', sandbox=...)": lambda: make_env(env_id, kw, partition="train", sandbox="auto"),
        "held-out evaluation (partition='test', sandbox=...)": lambda: make_env(env_id, kw, partition="test", sandbox="auto"),
        "SFT prompts (partition='train', sandbox=None)": lambda: make_env(env_id, kw, partition="train", sandbox=None),
        "a suite entry (dataset=tasks, seed=0, sandbox=...)": lambda: make_env(
            env_id, kw, dataset=_first_tasks(env_id, kw), seed=0, sandbox="auto"),
    }


def _first_tasks(env_id: str, kw: dict[str, Any], n: int = 2) -> list[Any]:
    """A few of the env's own tasks (built with the user's arguments only), the shape of what a suite hands it."""
    from toolgym.envs.registry import make_env

    env = make_env(env_id, kw)
    try:
        src = getattr(env.unwrapped, "source", None)
        if src is None:
            return []
        return [src.get(i) for i in range(n if src.size is None else min(n, src.size))]
    finally:
        env.close()


def check_builds(env_id: str, env_kwargs: dict[str, Any] | None = None, probe_tasks: int = 8) -> list[Check]:
    """One check per way a run builds the env (`run_builds`): it builds and resets; plus "the train and test
    partitions share no task" on the first `probe_tasks` tasks of each, when the env has a task source."""
    checks: list[Check] = []
    ids: dict[str, set[str]] = {}
    # built once with the user's arguments alone first: a bad argument of theirs (max_digits=0) is their
    # mistake, raised as its one line; what fails only with a run's arguments is a failed check below
    _first_tasks(env_id, dict(env_kwargs or {}))
    for label, factory in run_builds(env_id, env_kwargs).items():
        try:
            env = factory()
        except Exception as exc:
            checks.append(Check(f"builds for {label}", False, f"{type(exc).__name__}: {exc}"))
            continue
        try:
            env.reset(seed=0)
            src = getattr(env.unwrapped, "source", None)
            if src is not None and "partition=" in label:
                part = "train" if "'train'" in label else "test"
                n = probe_tasks if src.size is None else min(probe_tasks, src.size)
                ids.setdefault(part, set()).update(src.get(i).id for i in range(n))
            checks.append(Check(f"builds for {label}", True))
        except Exception as exc:
            checks.append(Check(f"builds for {label}", False, f"reset raised {type(exc).__name__}: {exc}"))
        finally:
            env.close()
    if ids.get("train") and ids.get("test"):
        shared = sorted(ids["train"] & ids["test"])
        checks.append(Check("the train and test partitions share no task", not shared,
                            f"shared ids: {shared[:5]}" if shared else ""))
    return checks


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


def check_model_format(make_env: Callable[[], Any], template: Any, seed: int = 0) -> tuple[list[Check], dict[str, Any]]:
    """Checks of one model against an environment (`toolgym envs check ID --model M`): does the model's
    chat template render the env's tools, which tool-call format the run would parse (and why), does a
    call written in that format reach the env, and do the tool results render through the template.

    `template` is the model's `toolgym.agents.chat.ChatTemplate` (passed in: envs never import agents).
    Returns the checks and a summary for --json."""
    parser = template.tool_parser
    summary: dict[str, Any] = {"tool_parser": parser.name, "tool_parser_source": template.tool_parser_source,
                               "renders_tools": bool(template.renders_tools())}
    checks: list[Check] = []
    env = make_env()
    try:
        obs, info = env.reset(seed=seed)
        tools = info.get("tools") or []
        names = [t.get("function", {}).get("name") for t in tools]
        try:
            prompt = template.decode(template.prompt_ids(obs, tools or None))
            missing = [n for n in names if n not in prompt]
            where = ("rendered by the model's template" if summary["renders_tools"] else
                     "the template prints no tools: toolgym adds them to the system turn, with an example call")
            checks.append(Check("the prompt shows the env's tools", not missing,
                                f"missing {missing}" if missing else f"{len(names)} tools, {where}"))
        except Exception as exc:
            checks.append(Check("the prompt shows the env's tools", False, f"{type(exc).__name__}: {exc}"))
        why = {"template": "read from the chat template", "override": "named by the run",
               "default": "the template shows no call format: Hermes tags, which the tool block describes"}
        checks.append(Check(f"tool calls are read as {parser.name}", True, why.get(template.tool_parser_source, "")))
        use = getattr(getattr(env, "unwrapped", env), "use_tool_format", None)
        if not callable(use) or not names:
            reason = "the env has no tools" if not names else "the env reads tool calls its own way (no use_tool_format)"
            checks.append(Check(f"a call written as {parser.name} reaches the env", True, f"not checked: {reason}"))
            summary["call_reaches_env"] = None
            return checks, summary
        use(parser)
        env.reset(seed=seed)
        call = parser.format_call("no_such_tool_xyz", {})
        out = env.step(call)
        msgs = out[0] if isinstance(out, tuple) and out else []
        reached = any(m.get("role") == "tool" and "no_such_tool_xyz" in str(m.get("content", "")) for m in msgs)
        checks.append(Check(f"a call written as {parser.name} reaches the env", reached,
                            "" if reached else f"the env did not answer {call!r} with a tool message: {repr(msgs)[:200]}"))
        summary["call_reaches_env"] = reached
        try:
            results = [m for m in msgs if m.get("role") == "tool"] or [
                {"role": "tool", "name": names[0], "tool_call_id": parser.call_id(1, 0), "content": "ok"}]
            text = template.decode(template.continuation_ids(template.encode(call), results))
            checks.append(Check("tool results render through the model's template", bool(text), text[:200]))
        except Exception as exc:
            checks.append(Check("tool results render through the model's template", False,
                                f"{type(exc).__name__}: {exc}"))
    finally:
        env.close()
    return checks, summary


def checks_to_json(checks: list[Check]) -> list[dict[str, Any]]:
    return [asdict(c) for c in checks]
