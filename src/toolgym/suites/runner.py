"""Run a suite: load each entry's tasks, score them in the chosen mode, keep per-task records,
and build the report.

An entry's tasks are its environment's (`toolgym.envs.tasks.catalog`, found by the entry's source
string) with the prompts of the mode (`toolgym.suites.entries`). Modes:
  loglik    multiple-choice entries scored by log-likelihood (acc, acc_norm); others are skipped.
  generate  the model answers each prompt (k samples, no tools); the entry's environment grades them.
  tools     multi-turn episodes in the entry's environment through the agents' RolloutRunner.
Records are appended per batch of tasks, so a run that stops resumes with the unfinished tasks.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from toolgym.envs.registry import spec as env_spec
from toolgym.envs.tasks.catalog import NotConfigured
from toolgym.errors import AssetError, ConfigError, ToolgymError
from toolgym.suites.bench_config import MODES as MODES
from toolgym.suites.bench_config import BenchConfig as BenchConfig
from toolgym.suites.bench_config import Log
from toolgym.suites.entries import entry_tasks
from toolgym.suites.generate_mode import run_generate
from toolgym.suites.loglik_mode import run_loglik
from toolgym.suites.records import RecordStore
from toolgym.suites.registry import Suite, load_suite
from toolgym.suites.sampling import check_names
from toolgym.suites.sampling import make_sampler as make_sampler
from toolgym.suites.tools_mode import run_tools_entry


class Interrupted(ToolgymError):
    """The run was stopped (Ctrl-C, or SIGTERM under toolgym._stop.signals) after writing a partial report; the
    same command resumes it. ``exit_code`` is the shell's for the signal (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, message: str, *, report: Path, cause: KeyboardInterrupt) -> None:
        super().__init__(message)
        self.report = report
        self.signal_name = getattr(cause, "name", "SIGINT")  # a plain KeyboardInterrupt is Python's SIGINT
        self.exit_code = getattr(cause, "exit_code", 130)


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    import numpy as np  # a core dependency

    np.random.seed(seed)
    import sys

    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)


_MODE_FN = {"loglik": run_loglik, "generate": run_generate, "tools": run_tools_entry}


def run_benchmark(cfg: BenchConfig, out_dir: str | Path, *, log: Log = print, suite: Suite | None = None) -> dict[str, Any]:
    """Run (or resume) a suite into out_dir; returns the report dict (also written as JSON/Markdown/PNG).

    A KeyboardInterrupt during the run (Ctrl-C under Python's default SIGINT handler) writes a partial
    report and raises :class:`Interrupted`. The caller's signal handlers are left as they are.
    """
    from toolgym.suites.report import build_report, write_report

    suite = (suite or load_suite(cfg.suite)).select(cfg.subset)
    check_names(cfg)
    for entry in suite.entries:  # a suite file's typo'd env id: one line before the run folder is made
        env_spec(entry.env)
    _seed_everything(cfg.seed)
    store = RecordStore(out_dir)
    store.check_config(cfg.to_dict())
    state: dict[str, Any] = {"closers": []}
    log(f"{suite.name} ({cfg.mode}): {len(suite.entries)} entries -> {out_dir}; "
        "Ctrl-C or SIGTERM writes a partial report, the same command resumes")
    skipped: dict[str, str] = {}
    n_tasks: dict[str, list[str]] = {}
    t0 = time.perf_counter()
    interrupted: KeyboardInterrupt | None = None
    try:
        for entry in suite.entries:
            log(f"- {entry.name}: loading tasks")
            try:
                loaded = entry_tasks(entry, cfg)
            except NotConfigured as exc:
                skipped[entry.name] = f"not configured: {exc}"
                log(f"- {entry.name}: skipped ({exc})")
                continue
            except AssetError as exc:
                if entry.optional:
                    skipped[entry.name] = str(exc)
                    log(f"- {entry.name}: skipped ({exc})")
                    continue
                raise
            if cfg.mode == "loglik" and loaded.kind != "mc":
                skipped[entry.name] = "loglik mode scores multiple-choice entries only"
                log(f"- {entry.name}: skipped (loglik mode scores multiple-choice entries only)")
                continue
            tasks = loaded.tasks
            ids = [t.id for t in tasks]
            if len(set(ids)) != len(ids):
                raise ConfigError(f"entry {entry.name}: task ids are not unique")
            n_tasks[entry.name] = ids
            done = store.done(entry.name)
            todo = [t for t in tasks if t.id not in done]
            log(f"- {entry.name}: {len(tasks)} tasks, {len(tasks) - len(todo)} already done")
            if todo:
                _seed_everything(cfg.seed)
                _MODE_FN[cfg.mode](entry, loaded, todo, cfg, store, state, log)
    except KeyboardInterrupt as exc:
        # Ctrl-C on a long CPU run (or SIGTERM, under toolgym._stop.signals): keep what is scored (a partial
        # report) and say how to go on.
        interrupted = exc
    finally:
        for close in state["closers"]:
            try:
                close()
            except Exception:  # noqa: BLE001 - closing must not hide the real outcome
                pass
    report = build_report(cfg, suite, store.load(), n_tasks, skipped, wall_s=time.perf_counter() - t0)
    if interrupted is not None:
        report["partial"] = True
    write_report(report, out_dir)
    if interrupted is not None:
        raise Interrupted(f"interrupted; partial report in {Path(out_dir) / 'report.md'}; "
                          "run the same command again to resume (finished tasks are kept)",
                          report=Path(out_dir) / "report.md", cause=interrupted)
    return report
