"""An entry's tasks and environment in one mode.

The tasks are the task family's (`toolgym.envs.tasks.family`, found by the entry's source string, as
an environment finds them) with the prompts of the mode: the environment's in tools mode, the generate
prompts in generate mode, lm-eval's contexts in loglik mode. The environment is the entry's, built on
those tasks with the suites' judging protocol; its rubric scores every mode but loglik.
"""

from __future__ import annotations

from typing import Any

from toolgym.envs.tasks.catalog import Loaded, load
from toolgym.envs.tasks.styles import PromptStyle
from toolgym.errors import ConfigError
from toolgym.suites.bench_config import BenchConfig
from toolgym.suites.registry import CODE_ENV, SuiteEntry

STYLE: dict[str, PromptStyle] = {"tools": "env", "generate": "generate", "loglik": "loglik"}
# The suites' judging protocol for code: per-test time limits for tasks that state none (an entry's
# options.time_limit_s wins, then the task family's `time_limit_s`), the memory each test gets, and
# all-or-nothing rewards as pass@k needs.
DEFAULT_TIME_LIMIT_S = 6.0
MEMORY_MB = 512


def entry_tasks(entry: SuiteEntry, cfg: BenchConfig) -> Loaded:
    """The entry's tasks with the prompts of cfg.mode (the first cfg.limit of them)."""
    opts = dict(entry.options)
    if entry.source.partition(":")[0] == "env":
        return env_tasks(entry, cfg)
    if cfg.trust_pickle:
        opts["trust_pickle"] = True
    loaded = load(entry.source, style=STYLE[cfg.mode], options=opts, seed=cfg.seed)
    if cfg.limit:
        loaded.tasks = loaded.tasks[: cfg.limit]
    return loaded


ENV_SOURCE_TASKS = 100  # an `env:` entry's tasks when neither --limit nor options.tasks says


def env_tasks(entry: SuiteEntry, cfg: BenchConfig) -> Loaded:
    """`source: env[:PARTITION]`: the entry's environment's own tasks (default the held-out "test" partition,
    as the trainer evaluates), the first `cfg.limit` or `options.tasks` of them. This is how a suite scores an
    environment of your own, e.g. a trained checkpoint on the environment it was trained on. Tools mode only:
    the environment's rubric is the grader."""
    from toolgym.envs.registry import make_env as build

    if cfg.mode != "tools":
        raise ConfigError(f"entry {entry.name!r}: source {entry.source!r} (the environment's own tasks) is scored by "
                          f"its rubric in tools mode; run with --mode tools (got {cfg.mode!r})")
    partition = entry.source.partition(":")[2] or "test"  # checked when the suite was read (check_source)
    env = build(entry.env, entry.options.get("env_kwargs"), partition=None if partition == "all" else partition,
                sandbox=None, seed=cfg.seed)
    try:
        source = getattr(env.unwrapped, "source", None)
        if source is None:
            raise ConfigError(f"entry {entry.name!r}: environment {entry.env!r} has no task source of its own")
        n = int(cfg.limit or entry.options.get("tasks") or ENV_SOURCE_TASKS)
        tasks = [source.get(i) for i in range(n if source.size is None else min(n, source.size))]
    finally:
        env.close()
    return Loaded(entry.env, "env", tasks)


def env_kwargs(entry: SuiteEntry, loaded: Loaded, cfg: BenchConfig) -> dict[str, Any]:
    """Keyword arguments of the entry's environment beyond its tasks."""
    kwargs: dict[str, Any] = {"seed": cfg.seed, **dict(entry.options.get("env_kwargs") or {})}
    if entry.env == CODE_ENV:
        family_limit = loaded.family.time_limit_s if loaded.family is not None else None
        limit = entry.options.get("time_limit_s") or family_limit or DEFAULT_TIME_LIMIT_S
        kwargs.update(reward_mode="all", time_limit_s=float(limit), memory_mb=MEMORY_MB, tools=cfg.mode == "tools")
    return kwargs


def make_env(entry: SuiteEntry, tasks: Any, loaded: Loaded, cfg: BenchConfig, *, sandbox: Any) -> Any:
    """The entry's environment (`toolgym.make`) on `tasks` (a list of Tasks or a TaskSource); `sandbox`: an
    open sandbox it borrows, a backend name it opens itself, or None."""
    from toolgym.envs.registry import make_env

    kw = env_kwargs(entry, loaded, cfg)
    return make_env(entry.env, kw, dataset=tasks, sandbox=sandbox, seed=kw.pop("seed"))
