"""Environment checker behind `toolgym envs check ID`: the reset/step contract, determinism per
seed, JSON-serializable info, valid JSON-Schema tool schemas, rewards within the documented
range, and robustness to hostile model text. Probes never need a sandbox to answer.

Each property is a named check (`CHECKS`, in the order `check_env` runs them; written in
:mod:`toolgym.envs.checks`), so a plug-in author can run the one that failed alone:
`run_check("reset_determinism", make)` or `toolgym envs check ID --only NAME`. Besides them: `check_builds`
(the env builds each way a run builds it) and `check_model_format` (a model's chat template against the env).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict
from typing import Any

from toolgym.envs.checks import CHECKS, PROBES, Check, EnvCheck, EnvUnderCheck, NotChecked, env_check

__all__ = ["CHECKS", "PROBES", "Check", "EnvCheck", "EnvUnderCheck", "NotChecked", "check_builds", "check_env",
           "check_model_format", "checks_to_json", "env_check", "run_builds", "run_check"]


def check_env(make_env: Callable[[], Any], seed: int = 0, probes: dict[str, str] | None = None,
              only: Iterable[str] | None = None) -> list[Check]:
    """Run the named checks (`CHECKS`, in order; `only`: just these names) on one environment built by
    `make_env()`; returns one Check per property. A check whose prerequisite failed (reset raised: nothing
    after it can be asked) is left out, unless named in `only`, where it fails with the reason. An unknown
    name raises ConfigError with the known ones."""
    wanted = None if only is None else {CHECKS.find(n, "the checks to run").name for n in only}
    selected = [c for c in CHECKS.values() if wanted is None or c.name in wanted]
    u = EnvUnderCheck(make_env, seed, probes)
    checks: list[Check] = []
    closed = False
    try:
        for c in selected:
            try:
                checks.append(c.run(u))
            except NotChecked as why:
                if wanted is not None:
                    checks.append(Check(c.title, False, f"not checked: {why}"))
            closed = closed or c.name == "close_idempotent"
    finally:
        if not closed:
            try:
                u.close()
            except Exception:  # a close that raises fails close_idempotent, when that check is asked for
                pass
    return checks


def run_check(name: str, make_env: Callable[[], Any], seed: int = 0, probes: dict[str, str] | None = None) -> Check:
    """Run the one check `name` (see `CHECKS`) on a fresh environment from `make_env()`."""
    return check_env(make_env, seed=seed, probes=probes, only=[name])[0]


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
