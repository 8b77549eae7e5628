"""Compare two benchmark reports on the tasks they share: per-entry deltas with a paired bootstrap
interval and p-value, plus McNemar's exact test when the per-task scores are 0/1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolgym.errors import ConfigError
from toolgym.suites.metrics import paired_test


def load_report(path: str | Path) -> dict[str, Any]:
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "report.json"
    if not p.is_file():
        raise ConfigError(f"report {p} not found (pass a report.json or its run folder)")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        raise ConfigError(f"{p} is not JSON") from None
    if "entries" not in data or "toolgym_report" not in data:
        raise ConfigError(f"{p} is not a toolgym bench report")
    return data


def compare_reports(a: dict[str, Any], b: dict[str, Any], *, seed: int = 0, alpha: float = 0.05) -> dict[str, Any]:
    """Per shared entry: n shared tasks, means, delta (b - a), CI, p-values and a significance flag."""
    rows = []
    for name, ea in a["entries"].items():
        eb = b["entries"].get(name)
        if eb is None:
            continue
        if ea.get("headline") != eb.get("headline"):
            rows.append({"entry": name, "error": f"different metrics ({ea.get('headline')} vs {eb.get('headline')})"})
            continue
        sa, sb = ea.get("task_scores", {}), eb.get("task_scores", {})
        shared = sorted(set(sa) & set(sb))
        if not shared:
            rows.append({"entry": name, "error": "no shared tasks"})
            continue
        t = paired_test([sa[i] for i in shared], [sb[i] for i in shared], seed=seed)
        p = t.p_mcnemar if t.p_mcnemar is not None else t.p_bootstrap
        rows.append({"entry": name, "metric": ea.get("headline"), **t.to_dict(), "p": p, "significant": p < alpha})
    return {"a": a["config"].get("model"), "b": b["config"].get("model"), "alpha": alpha, "entries": rows}


def format_comparison(cmp: dict[str, Any]) -> str:
    lines = [f"A = {cmp['a']}   B = {cmp['b']}   (delta = B - A, paired on shared tasks)",
             f"{'entry':<16}{'metric':<10}{'n':>6}{'A %':>8}{'B %':>8}{'delta':>8}  {'95% CI':<18}{'p':>9}  test"]
    for r in cmp["entries"]:
        if "error" in r:
            lines.append(f"{r['entry']:<16}{r['error']}")
            continue
        test = "McNemar" if r["p_mcnemar"] is not None else "bootstrap"
        star = " *" if r["significant"] else ""
        ci = f"[{100 * r['low']:+.1f}, {100 * r['high']:+.1f}]"
        lines.append(f"{r['entry']:<16}{r['metric']:<10}{r['n']:>6}{100 * r['mean_a']:>8.1f}{100 * r['mean_b']:>8.1f}"
                     f"{100 * r['delta']:>+8.1f}  {ci:<18}{r['p']:>9.3g}  {test}{star}")
    lines.append(f"* significant at alpha = {cmp['alpha']}")
    return "\n".join(lines)
