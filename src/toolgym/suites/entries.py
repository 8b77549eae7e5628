"""An entry's tasks and environment in one mode.

The tasks are the task family's (`toolgym.envs.tasks.catalog`, found by the entry's source string, as
an environment finds them) with the prompts of the mode: the environment's in tools mode, the generate
prompts in generate mode, lm-eval's contexts in loglik mode. The environment is the entry's, built on
those tasks with the suites' judging protocol; its rubric scores every mode but loglik.
"""

from __future__ import annotations

from typing import Any

from toolgym.envs.tasks.catalog import Loaded, load
from toolgym.envs.tasks.styles import PromptStyle
from toolgym.suites.bench_config import BenchConfig
from toolgym.suites.registry import CODE_ENV, SuiteEntry

STYLE: dict[str, PromptStyle] = {"tools": "env", "generate": "generate", "loglik": "loglik"}
# The suites' judging protocol for code: per-test time limits for tasks that state none (an entry's
# options.time_limit_s wins), the memory each test gets, and all-or-nothing rewards as pass@k needs.
TIME_LIMIT_S = {"codecontests": 10.0, "kattis": 2.0}
DEFAULT_TIME_LIMIT_S = 6.0
MEMORY_MB = 512


def entry_tasks(entry: SuiteEntry, cfg: BenchConfig) -> Loaded:
    """The entry's tasks with the prompts of cfg.mode (the first cfg.limit of them)."""
    opts = dict(entry.options)
    if cfg.trust_pickle:
        opts["trust_pickle"] = True
    loaded = load(entry.source, style=STYLE[cfg.mode], options=opts, seed=cfg.seed)
    if cfg.limit:
        loaded.tasks = loaded.tasks[: cfg.limit]
    return loaded


def env_kwargs(entry: SuiteEntry, loaded: Loaded, cfg: BenchConfig) -> dict[str, Any]:
    """Keyword arguments of the entry's environment beyond its tasks."""
    kwargs: dict[str, Any] = {"seed": cfg.seed}
    if entry.env == CODE_ENV:
        limit = entry.options.get("time_limit_s") or TIME_LIMIT_S.get(loaded.dataset, DEFAULT_TIME_LIMIT_S)
        kwargs.update(reward_mode="all", time_limit_s=float(limit), memory_mb=MEMORY_MB, tools=cfg.mode == "tools")
    return kwargs


def make_env(entry: SuiteEntry, tasks: Any, loaded: Loaded, cfg: BenchConfig, *, sandbox: Any) -> Any:
    """The entry's environment (`toolgym.make`) on `tasks` (a list of Tasks or a TaskSource); `sandbox`: an
    open sandbox it borrows, a backend name it opens itself, or None."""
    import toolgym

    return toolgym.make(entry.env, dataset=tasks, sandbox=sandbox, **env_kwargs(entry, loaded, cfg))
