"""Generate mode: the model answers each task's generate prompt (k samples, no tools) and the entry's
environment grades every answer (`toolgym.suites.grading`). Completions come from a sampler, or from a
JSONL file of outputs produced elsewhere."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from toolgym._jsonl import iter_jsonl
from toolgym._progress import eta_text
from toolgym.envs.tasks.catalog import Loaded
from toolgym.envs.types import Task
from toolgym.errors import ConfigError
from toolgym.suites import grading
from toolgym.suites.bench_config import BenchConfig, Log
from toolgym.suites.entries import make_env
from toolgym.suites.records import RecordStore
from toolgym.suites.registry import SuiteEntry
from toolgym.suites.sampling import generate_chunk, sampling_params, shared_sampler


class Completer:
    """Produces n completions per task (text)."""

    def complete(self, entry: str, tasks: list[Task], n: int) -> list[list[str]]:  # pragma: no cover
        raise NotImplementedError


class FileCompleter(Completer):
    """Completions read from a JSONL file: {"id", "entry"?, "completion" | "completions": [...]}; lets
    outputs produced elsewhere be scored with the same graders."""

    def __init__(self, path: str | Path) -> None:
        self.by_key: dict[tuple[str | None, str], list[str]] = {}
        p = Path(path).expanduser()
        if not p.is_file():
            raise ConfigError(f"completions file {p} not found")
        for n, row in iter_jsonl(p, error=ConfigError, objects=True):
            try:
                outs = row["completions"] if "completions" in row else [row["completion"]]
                self.by_key[(row.get("entry"), str(row["id"]))] = [str(o) for o in outs]
            except (KeyError, TypeError):
                raise ConfigError(f"{p}:{n}: needs 'id' and 'completion' or 'completions'") from None

    def complete(self, entry: str, tasks: list[Task], n: int) -> list[list[str]]:
        out = []
        for t in tasks:
            outs = self.by_key.get((entry, t.id)) or self.by_key.get((None, t.id))
            if outs is None:
                raise ConfigError(f"completions file has nothing for {entry}/{t.id}")
            if len(outs) < n:
                raise ConfigError(f"completions file has {len(outs)} completion(s) for {entry}/{t.id}, need {n}")
            out.append(outs[:n])
        return out


class SamplerCompleter(Completer):
    """Single-turn generation with any toolgym Sampler (token ids in, token ids out)."""

    def __init__(self, sampler: Any, template: Any, params: Any) -> None:
        self.sampler, self.template, self.params = sampler, template, params

    def complete(self, entry: str, tasks: list[Task], n: int) -> list[list[str]]:
        prompts = [self.template.prompt_ids(t.prompt) for t in tasks]
        groups = self.sampler.generate(prompts, self.params.with_(n=n))
        return [[self.template.decode(s.token_ids, skip_special_tokens=True) for s in g] for g in groups]


def _completer(cfg: BenchConfig, state: dict[str, Any], log: Log) -> Completer:
    if "completer" not in state:
        if cfg.completions:
            state["completer"] = FileCompleter(cfg.completions)
        else:
            sampler, template = shared_sampler(cfg, state, log)
            state["completer"] = SamplerCompleter(sampler, template, sampling_params(cfg))
    return state["completer"]


def run_generate(entry: SuiteEntry, loaded: Loaded, todo: list[Task], cfg: BenchConfig, store: RecordStore,
                 state: dict[str, Any], log: Log) -> None:
    """Complete and grade the entry's unfinished tasks, a chunk at a time; append one record per task."""
    from contextlib import nullcontext

    completer = _completer(cfg, state, log)
    if loaded.kind == "code":
        from toolgym.sandbox import Limits, open_sandbox

        opened: Any = open_sandbox(backend=cfg.sandbox_backend, limits=Limits(timeout_s=60, memory_mb=1024))
    else:
        opened = nullcontext(None)
    with opened as sandbox:
        env = make_env(entry, loaded.tasks, loaded, cfg, sandbox=sandbox)
        try:
            chunk = generate_chunk(cfg)
            log(f"  {entry.name}: 0/{len(todo)} done, {min(chunk, len(todo))} at a time")
            t_start = time.perf_counter()
            for start in range(0, len(todo), chunk):
                part = todo[start : start + chunk]
                outs = completer.complete(entry.name, part, cfg.samples)
                jobs = [(t, o) for t, group in zip(part, outs, strict=True) for o in group]
                grades = grading.grade_all(env, loaded.kind, jobs, concurrency=cfg.concurrency)
                store.append(grading.records(entry.name, loaded.kind, part, outs, grades))
                done = min(start + chunk, len(todo))
                log(f"  {entry.name}: {done}/{len(todo)} done ({eta_text(done, len(todo), time.perf_counter() - t_start)})")
        finally:
            env.close()
