"""Run a suite: load each entry's tasks, score them in the chosen mode, keep per-task records,
and build the report.

Modes:
  loglik    multiple-choice entries scored by log-likelihood (acc, acc_norm); others are skipped.
  generate  the model answers each prompt (k samples, no tools); answers graded per kind.
  tools     multi-turn episodes in the entry's environment through the agents' RolloutRunner.
Records are appended per batch of tasks, so a run that stops resumes with the unfinished tasks.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from toolgym._jsonl import iter_jsonl
from toolgym.errors import AssetError, ConfigError, ToolgymError
from toolgym.suites.eval_task import EvalTask
from toolgym.suites.records import RecordStore
from toolgym.suites.registry import Suite, SuiteEntry, load_suite
from toolgym.suites.source_strings import NotConfigured, load_source

MODES = ("tools", "generate", "loglik")


class Interrupted(ToolgymError):
    """The run was stopped (Ctrl-C) after writing a partial report; the same command resumes it."""


@dataclass
class BenchConfig:
    """Everything that determines a run's numbers (stored in the report)."""

    suite: str
    model: str
    mode: str = "generate"
    subset: str | None = None
    limit: int | None = None
    seed: int = 0
    samples: int = 1
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 512
    sampler: str = "hf"
    base_url: str | None = None
    tokenizer: str | None = None
    batch: int = 8
    concurrency: int = 64
    sandbox_backend: str = "auto"
    trust_pickle: bool = False
    completions: str | None = None
    max_turns: int = 4
    device: str = "auto"  # hf sampler and loglik model: auto | cpu | cuda | cuda:N (not a resume key)
    tool_parser: str | None = None  # tools mode: the model's tool-call format; None: from the chat template

    def __post_init__(self) -> None:
        from toolgym.devices import check_device

        self.device = check_device(self.device, "--device")
        if self.device.startswith("cuda") and self.completions is None:  # no CUDA: one line now, not after loading
            from toolgym.devices import resolve_device

            resolve_device(self.device, what="--device", local_rank=None)
        if self.mode not in MODES:
            raise ConfigError(f"--mode must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.samples < 1:
            raise ConfigError("--samples must be >= 1")
        if self.limit is not None and self.limit < 1:
            raise ConfigError("--limit must be >= 1")
        if self.tool_parser is not None:
            from toolgym.envs.parsing import get_format

            get_format(self.tool_parser)
        if self.samples > 1 and self.temperature == 0:
            raise ConfigError("--samples > 1 needs --temperature > 0 (greedy samples would all be equal)")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Log = Callable[[str], None]


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    import numpy as np  # a core dependency

    np.random.seed(seed)
    import sys

    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)


def entry_tasks(entry: SuiteEntry, cfg: BenchConfig) -> list[EvalTask]:
    opts = dict(entry.options)
    if cfg.trust_pickle:
        opts["trust_pickle"] = True
    tasks = load_source(entry.source, options=opts, seed=cfg.seed)
    return tasks[: cfg.limit] if cfg.limit else tasks


class Completer:
    """Produces n completions per task (text)."""

    def complete(self, entry: str, tasks: list[EvalTask], n: int) -> list[list[str]]:  # pragma: no cover
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

    def complete(self, entry: str, tasks: list[EvalTask], n: int) -> list[list[str]]:
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

    def complete(self, entry: str, tasks: list[EvalTask], n: int) -> list[list[str]]:
        prompts = [self.template.prompt_ids([{"role": "user", "content": t.prompt}]) for t in tasks]
        groups = self.sampler.generate(prompts, self.params.with_(n=n))
        return [[self.template.decode(s.token_ids, skip_special_tokens=True) for s in g] for g in groups]


def make_sampler(cfg: BenchConfig) -> tuple[Any, Any]:
    """(sampler, chat template) for cfg.sampler, a registered sampler (toolgym.agents.samplers)."""
    from toolgym.agents.chat import ChatTemplate
    from toolgym.agents.samplers import get_sampler, names_where
    from toolgym.suites.models import resolve_model

    spec = get_sampler(cfg.sampler)
    if not spec.in_process and cfg.device != "auto":
        raise ConfigError(f"--device applies to --sampler {names_where('in_process')} (and --mode loglik); "
                          f"{cfg.sampler} places the model itself")
    if spec.remote:  # a served name: only the tokenizer is loaded here
        path = cfg.model
        tok_path = resolve_model(cfg.tokenizer or cfg.model, "tokenizer")
    else:
        path = resolve_model(cfg.model)
        tok_path = resolve_model(cfg.tokenizer, "tokenizer") if cfg.tokenizer else path
    template = ChatTemplate(tok_path, tool_parser=cfg.tool_parser)
    if spec.in_process:
        # One decode batch per chunk of prompts: two sequential batches of half the size cost
        # nearly twice as many decode steps on CPU. max_batch_size counts rows (samples), not prompts.
        options: dict[str, Any] = {"tokenizer": template.tokenizer,
                                   "max_batch_size": _generate_chunk(cfg) * cfg.samples,
                                   "device": cfg.device}
    elif spec.remote:
        options = {"base_url": cfg.base_url}
    else:  # an engine of its own (vllm: its compiled graphs, the "bench" default, for throughput)
        options = {"seed": cfg.seed}
    return spec.build(path, purpose="bench", **options), template


def _generate_chunk(cfg: BenchConfig) -> int:
    """Prompts generated (and then judged) together in generate mode."""
    return max(cfg.batch * 2, 8)


def _sampling_params(cfg: BenchConfig) -> Any:
    from toolgym.agents.sampling import SamplingParams

    return SamplingParams(n=cfg.samples, temperature=cfg.temperature, top_p=cfg.top_p,
                          max_tokens=cfg.max_tokens, seed=cfg.seed)


# ------------------------------------------------------------------------------------------ grading


def grade_text(task: EvalTask, text: str) -> tuple[bool, str | None]:
    """(correct, answer key) for one non-code completion."""
    if task.kind == "mc":
        from toolgym.envs.verifiers import extract_choice

        letter = extract_choice(text, labels=task.labels, choices=task.options or None)
        return letter is not None and letter == task.labels[task.gold], letter
    if task.kind == "math":
        from toolgym.suites.math import grade_math

        return grade_math(text, task.answer)
    raise ValueError(f"grade_text: {task.kind} tasks are judged in the sandbox")


def _judge_code(jobs: list[tuple[EvalTask, str]], cfg: BenchConfig, log: Log) -> list[dict[str, Any]]:
    from toolgym.sandbox import Limits, open_sandbox
    from toolgym.suites.code import judge_many

    with open_sandbox(backend=cfg.sandbox_backend, limits=Limits(timeout_s=60, memory_mb=1024)) as sb:
        return asyncio.run(judge_many(sb, jobs, concurrency=cfg.concurrency))


def score_completions(tasks: list[EvalTask], outs: list[list[str]], entry: str, cfg: BenchConfig,
                      log: Log) -> list[dict[str, Any]]:
    """Per-task records from completions: correctness of every sample (code judged in parallel)."""
    from toolgym.suites.code import build_program

    records = []
    if tasks and tasks[0].kind == "code":
        jobs = [(t, build_program(t, o)) for t, group in zip(tasks, outs, strict=True) for o in group]
        verdicts = _judge_code(jobs, cfg, log)
        it = iter(verdicts)
        for t, group in zip(tasks, outs, strict=True):
            vs = [next(it) for _ in group]
            records.append({"entry": entry, "id": t.id, "kind": t.kind, "correct": [bool(v["ok"]) for v in vs],
                            "answers": [None] * len(vs), "samples": [
                                {"text": o, "passed": v["passed"], "total": v["total"], "statuses": v["statuses"],
                                 **({"error": v["error"]} if v.get("error") else {})} for o, v in zip(group, vs, strict=True)]})
        return records
    for t, group in zip(tasks, outs, strict=True):
        graded = [grade_text(t, o) for o in group]
        records.append({"entry": entry, "id": t.id, "kind": t.kind, "reference": t.reference(),
                        "correct": [g[0] for g in graded], "answers": [g[1] for g in graded],
                        "samples": [{"text": o} for o in group]})
    return records


# ------------------------------------------------------------------------------------------- modes


def _run_loglik(entry: SuiteEntry, todo: list[EvalTask], cfg: BenchConfig, store: RecordStore,
                state: dict[str, Any], log: Log) -> None:
    from toolgym.suites.loglik import LoglikScorer
    from toolgym.suites.models import load_causal_lm
    from toolgym.suites.science import to_mc_items

    if "lm" not in state:
        state["lm"] = load_causal_lm(cfg.model, device=cfg.device)
    model, tok = state["lm"]
    scorer = LoglikScorer(model, tok, batch_questions=cfg.batch)
    # Similar lengths side by side: batches carry little padding (records are keyed by id, so the
    # order they are written in does not matter).
    todo = sorted(todo, key=lambda t: len(t.context) + sum(len(c) for c in t.choices))
    chunk = max(cfg.batch * 8, 32)
    t0 = time.perf_counter()
    for start in range(0, len(todo), chunk):
        part = todo[start : start + chunk]
        scores = scorer.score(to_mc_items(part))
        lm_task = {t.id: t.metadata.get("lmeval_task") for t in part}  # report.json's lm-eval `results`
        store.append([{"entry": entry.name, "id": s.id, "kind": "mc", "acc": s.acc, "acc_norm": s.acc_norm,
                       "pred": s.pred, "pred_norm": s.pred_norm, "gold": s.gold, "logliks": s.logliks,
                       "lmeval_task": lm_task.get(s.id)} for s in scores])
        done, dt = min(start + chunk, len(todo)), time.perf_counter() - t0
        log(f"  {entry.name}: {done}/{len(todo)} scored ({done / dt:.2f} questions/s, {dt:.0f} s)")


def _run_generate(entry: SuiteEntry, todo: list[EvalTask], cfg: BenchConfig, store: RecordStore,
                  state: dict[str, Any], log: Log) -> None:
    if "completer" not in state:
        if cfg.completions:
            state["completer"] = FileCompleter(cfg.completions)
        else:
            sampler, template = make_sampler(cfg)
            state["closers"].append(sampler.close)
            state["completer"] = SamplerCompleter(sampler, template, _sampling_params(cfg))
    completer: Completer = state["completer"]
    chunk = _generate_chunk(cfg)
    for start in range(0, len(todo), chunk):
        part = todo[start : start + chunk]
        t0 = time.perf_counter()
        outs = completer.complete(entry.name, part, cfg.samples)
        store.append(score_completions(part, outs, entry.name, cfg, log))
        log(f"  {entry.name}: {min(start + chunk, len(todo))}/{len(todo)} done ({time.perf_counter() - t0:.0f} s)")


def _run_tools(entry: SuiteEntry, todo: list[EvalTask], cfg: BenchConfig, store: RecordStore,
               state: dict[str, Any], log: Log) -> None:
    from toolgym.suites.tools_mode import run_tools_entry

    run_tools_entry(entry, todo, cfg, store, state, log)


_MODE_FN = {"loglik": _run_loglik, "generate": _run_generate, "tools": _run_tools}


def run_benchmark(cfg: BenchConfig, out_dir: str | Path, *, log: Log = print, suite: Suite | None = None) -> dict[str, Any]:
    """Run (or resume) a suite into out_dir; returns the report dict (also written as JSON/Markdown/PNG).

    A KeyboardInterrupt during the run (Ctrl-C under Python's default SIGINT handler) writes a partial
    report and raises :class:`Interrupted`. The caller's signal handlers are left as they are.
    """
    from toolgym.suites.report import build_report, write_report

    suite = (suite or load_suite(cfg.suite)).select(cfg.subset)
    _seed_everything(cfg.seed)
    store = RecordStore(out_dir)
    store.check_config(cfg.to_dict())
    state: dict[str, Any] = {"closers": []}
    log(f"{suite.name} ({cfg.mode}): {len(suite.entries)} entries -> {out_dir}; "
        "Ctrl-C writes a partial report, the same command resumes")
    skipped: dict[str, str] = {}
    n_tasks: dict[str, list[str]] = {}
    t0 = time.perf_counter()
    interrupted = False
    try:
        for entry in suite.entries:
            try:
                tasks = entry_tasks(entry, cfg)
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
            if cfg.mode == "loglik" and any(t.kind != "mc" for t in tasks):
                skipped[entry.name] = "loglik mode scores multiple-choice entries only"
                log(f"- {entry.name}: skipped (loglik mode scores multiple-choice entries only)")
                continue
            ids = [t.id for t in tasks]
            if len(set(ids)) != len(ids):
                raise ConfigError(f"entry {entry.name}: task ids are not unique")
            n_tasks[entry.name] = ids
            done = store.done(entry.name)
            todo = [t for t in tasks if t.id not in done]
            log(f"- {entry.name}: {len(tasks)} tasks, {len(tasks) - len(todo)} already done")
            if todo:
                _seed_everything(cfg.seed)
                _MODE_FN[cfg.mode](entry, todo, cfg, store, state, log)
    except KeyboardInterrupt:
        # Ctrl-C on a long CPU run: keep what is scored (a partial report) and say how to go on.
        interrupted = True
    finally:
        for close in state["closers"]:
            try:
                close()
            except Exception:  # noqa: BLE001 - closing must not hide the real outcome
                pass
    report = build_report(cfg, suite, store.load(), n_tasks, skipped, wall_s=time.perf_counter() - t0)
    if interrupted:
        report["partial"] = True
    write_report(report, out_dir)
    if interrupted:
        raise Interrupted(f"interrupted; partial report in {Path(out_dir) / 'report.md'}; "
                          "run the same command again to resume (finished tasks are kept)")
    return report
