"""Tools mode: each task runs as a multi-turn episode in the entry's environment (tool calls,
sandboxed execution, the environment's rubric), through the agents' RolloutRunner.

The tasks are the task family's with the environment's own prompts (`toolgym.suites.entries`), so an
episode here is the one the environment trains on. A sample counts as correct when its episode
reward is full (code environments judge all-or-nothing here, as pass@k requires).
"""

from __future__ import annotations

import time
from typing import Any

from toolgym._progress import eta_text
from toolgym.envs.tasks.catalog import Loaded
from toolgym.envs.types import Task
from toolgym.suites.bench_config import BenchConfig, Log
from toolgym.suites.entries import make_env
from toolgym.suites.grading import FULL
from toolgym.suites.records import RecordStore
from toolgym.suites.registry import SuiteEntry
from toolgym.suites.sampling import sampling_params, shared_sampler


def run_tools_entry(entry: SuiteEntry, loaded: Loaded, todo: list[Task], cfg: BenchConfig, store: RecordStore,
                    state: dict[str, Any], log: Log) -> None:
    """Run the entry's unfinished tasks as episodes; append one record per task."""
    from toolgym.agents.runner import EpisodeLimits, RolloutRunner, TaskSpec

    sampler, template = shared_sampler(cfg, state, log)

    def factory() -> Any:  # each episode's env opens the run's sandbox backend when a tool first needs it
        return make_env(entry, todo, loaded, cfg, sandbox=cfg.sandbox_backend)

    runner = RolloutRunner(sampler, template, factory, sampling_params(cfg).with_(n=1),
                           EpisodeLimits(max_turns=cfg.max_turns, max_total_tokens=cfg.max_tokens * (cfg.max_turns + 2)),
                           seed=cfg.seed)
    chunk = max(cfg.batch, 4)
    log(f"  {entry.name}: 0/{len(todo)} episode groups done, {min(chunk, len(todo))} at a time")
    t0 = time.perf_counter()
    for start in range(0, len(todo), chunk):
        part = list(range(start, min(start + chunk, len(todo))))
        groups = runner.run([TaskSpec(seed=cfg.seed, options={"index": i}) for i in part], group_size=cfg.samples)
        records = []
        for i, group in zip(part, groups, strict=True):
            records.append({
                "entry": entry.name, "id": todo[i].id, "kind": "tools",
                "correct": [t.reward >= FULL and not t.error for t in group],
                "answers": [None] * len(group),
                "samples": [{"reward": t.reward, "finish_reason": t.finish_reason, "error": t.error,
                             "turns": t.turns} for t in group],
            })
        store.append(records)
        done = min(start + chunk, len(todo))
        log(f"  {entry.name}: {done}/{len(todo)} episode groups done ({eta_text(done, len(todo), time.perf_counter() - t0)})")
