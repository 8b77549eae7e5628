"""Loglik mode: multiple-choice entries scored by log-likelihood, as lm-evaluation-harness scores them
(acc, acc_norm), on the requests the task family writes (`toolgym.envs.tasks.multiple_choice`)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from toolgym._progress import eta_text
from toolgym.envs.tasks.catalog import Loaded, load
from toolgym.envs.types import Task
from toolgym.suites.bench_config import BenchConfig, Log
from toolgym.suites.lmeval import lmeval_task_name
from toolgym.suites.records import RecordStore
from toolgym.suites.registry import SuiteEntry


def mc_items(tasks: Iterable[Task]) -> list[Any]:
    """Log-likelihood items (`toolgym.suites.loglik.MCItem`) of multiple-choice tasks in the "loglik" style."""
    from toolgym.suites.loglik import MCItem

    out = []
    for t in tasks:
        req = t.metadata["loglik"]
        out.append(MCItem(t.id, req["context"], list(req["continuations"]), t.metadata["labels"].index(t.ground_truth)))
    return out


def load_mc_items(dataset: str, split: str | None = None) -> list[Any]:
    """Log-likelihood items of a multiple-choice asset (e.g. "arc_challenge", test split by default)."""
    return mc_items(load(f"asset:{dataset}" + (f":{split}" if split else ""), style="loglik").tasks)


def run_loglik(entry: SuiteEntry, loaded: Loaded, todo: list[Task], cfg: BenchConfig, store: RecordStore,
               state: dict[str, Any], log: Log) -> None:
    """Score the entry's unfinished questions a chunk at a time; append one record per question."""
    from toolgym.suites.loglik import LoglikScorer
    from toolgym.suites.models import load_causal_lm

    if "lm" not in state:
        log(f"  loading the model: {cfg.model}")
        state["lm"] = load_causal_lm(cfg.model, device=cfg.device)
    model, tok = state["lm"]
    scorer = LoglikScorer(model, tok, batch_questions=cfg.batch)
    items = {i.id: i for i in mc_items(todo)}
    lm_task = {t.id: lmeval_task_name(loaded.dataset, t.metadata.get("subject")) for t in todo}  # report's `results`
    # Similar lengths side by side: batches carry little padding (records are keyed by id, so the
    # order they are written in does not matter).
    order = sorted(items.values(), key=lambda i: len(i.context) + sum(len(c) for c in i.choices))
    chunk = max(cfg.batch * 8, 32)
    t0 = time.perf_counter()
    for start in range(0, len(order), chunk):
        scores = scorer.score(order[start : start + chunk])
        store.append([{"entry": entry.name, "id": s.id, "kind": "mc", "acc": s.acc, "acc_norm": s.acc_norm,
                       "pred": s.pred, "pred_norm": s.pred_norm, "gold": s.gold, "logliks": s.logliks,
                       "lmeval_task": lm_task.get(s.id)} for s in scores])
        done, dt = min(start + chunk, len(order)), time.perf_counter() - t0
        log(f"  {entry.name}: {done}/{len(order)} scored ({done / dt:.2f} questions/s, {eta_text(done, len(order), dt)})")
