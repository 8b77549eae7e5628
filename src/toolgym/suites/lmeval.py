"""lm-evaluation-harness naming and aggregation, so toolgym's log-likelihood numbers read like lm-eval's.

A multiple-choice task knows the lm-eval task it matches (``lmeval_task``: ``arc_easy``, ``arc_challenge``,
``openbookqa``, ``sciq``, ``mmlu_<subject>``); :func:`lmeval_results` turns per-question records into
lm-eval's ``results`` section: ``{task: {"alias", "sample_len", "acc,none", "acc_stderr,none", ...}}``.
Per task the score is the mean and its stderr the sample standard deviation (n - 1) over sqrt(n), "N/A"
for a single question, as lm-eval's ``mean_stderr``. MMLU also gets lm-eval's category groups
(``mmlu_stem`` ...) and ``mmlu`` when all four categories ran: the size-weighted mean of the subjects
and the pooled-variance stderr (lm-eval's ``aggregate_subtask_metrics`` / ``pooled_sample_stderr``).
Pure Python: no lm-eval import needed.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from toolgym.envs.tasks.multiple_choice import mmlu_description as mmlu_description  # its old import path

# lm-eval's MMLU categories (the `tag` of each mmlu/default/mmlu_<subject>.yaml) and their group aliases.
MMLU_CATEGORIES: dict[str, tuple[str, ...]] = {
    "stem": (
        "abstract_algebra", "anatomy", "astronomy", "college_biology", "college_chemistry",
        "college_computer_science", "college_mathematics", "college_physics", "computer_security",
        "conceptual_physics", "electrical_engineering", "elementary_mathematics", "high_school_biology",
        "high_school_chemistry", "high_school_computer_science", "high_school_mathematics",
        "high_school_physics", "high_school_statistics", "machine_learning",
    ),
    "other": (
        "business_ethics", "clinical_knowledge", "college_medicine", "global_facts", "human_aging",
        "management", "marketing", "medical_genetics", "miscellaneous", "nutrition", "professional_accounting",
        "professional_medicine", "virology",
    ),
    "social_sciences": (
        "econometrics", "high_school_geography", "high_school_government_and_politics",
        "high_school_macroeconomics", "high_school_microeconomics", "high_school_psychology", "human_sexuality",
        "professional_psychology", "public_relations", "security_studies", "sociology", "us_foreign_policy",
    ),
    "humanities": (
        "formal_logic", "high_school_european_history", "high_school_us_history", "high_school_world_history",
        "international_law", "jurisprudence", "logical_fallacies", "moral_disputes", "moral_scenarios",
        "philosophy", "prehistory", "professional_law", "world_religions",
    ),
}
_CATEGORY_OF = {s: c for c, subjects in MMLU_CATEGORIES.items() for s in subjects}
# Metrics each lm-eval task lists in its YAML metric_list (MMLU: acc only).
_METRICS = {"arc_easy": ("acc", "acc_norm"), "arc_challenge": ("acc", "acc_norm"),
            "openbookqa": ("acc", "acc_norm"), "sciq": ("acc", "acc_norm")}


def lmeval_task_name(dataset: str, subject: str | None = None) -> str | None:
    """The lm-eval task whose prompt toolgym's context matches, or None (e.g. GPQA, an MMLU record without
    a subject)."""
    if dataset in _METRICS:
        return dataset
    if dataset == "mmlu" and subject:
        return f"mmlu_{subject}"
    return None


def _metrics_of(task: str) -> tuple[str, ...]:
    return _METRICS.get(task, ("acc",))


def mean_stderr(values: list[float]) -> float | str:
    """lm-eval's stderr of a mean: sample standard deviation over sqrt(n); "N/A" below two values."""
    n = len(values)
    if n < 2:
        return "N/A"
    mu = sum(values) / n
    return math.sqrt(sum((x - mu) ** 2 for x in values) / (n - 1)) / math.sqrt(n)


def _pooled_stderr(stderrs: list[float], sizes: list[int]) -> float:
    var = sum((n - 1) * se**2 * n for n, se in zip(sizes, stderrs, strict=True)) / (sum(sizes) - len(sizes))
    return math.sqrt(var / sum(sizes))


def _group(alias: str, leaves: list[dict[str, Any]]) -> dict[str, Any]:
    sizes = [leaf["sample_len"] for leaf in leaves]
    out: dict[str, Any] = {"alias": alias, "sample_len": sum(sizes)}
    values = [leaf["acc,none"] for leaf in leaves]
    out["acc,none"] = sum(v * n for v, n in zip(values, sizes, strict=True)) / sum(sizes)
    stderrs = [leaf["acc_stderr,none"] for leaf in leaves]
    ok = "N/A" not in stderrs and sum(sizes) > len(sizes)
    out["acc_stderr,none"] = _pooled_stderr(stderrs, sizes) if ok else "N/A"
    return out


def lmeval_results(records: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """lm-eval's ``results`` section from log-likelihood records carrying ``lmeval_task``, ``acc`` and
    ``acc_norm`` (records without ``lmeval_task`` are left out; a repeated (task, id) counts once)."""
    by_task: dict[str, dict[str, dict[str, Any]]] = {}
    for r in records:
        task = r.get("lmeval_task")
        if task and "acc" in r:
            by_task.setdefault(task, {})[str(r["id"])] = r
    results: dict[str, dict[str, Any]] = {}
    for task in sorted(by_task):
        recs = list(by_task[task].values())
        alias = task[len("mmlu_"):] if task.startswith("mmlu_") else task
        entry: dict[str, Any] = {"alias": alias, "sample_len": len(recs)}
        for m in _metrics_of(task):
            vals = [float(r[m]) for r in recs]
            entry[f"{m},none"] = sum(vals) / len(vals)
            entry[f"{m}_stderr,none"] = mean_stderr(vals)
        results[task] = entry
    categories: dict[str, list[dict[str, Any]]] = {}
    for task, entry in results.items():
        cat = _CATEGORY_OF.get(task[len("mmlu_"):]) if task.startswith("mmlu_") else None
        if cat:
            categories.setdefault(cat, []).append(entry)
    groups = {f"mmlu_{cat}": _group(cat.replace("_", " "), leaves)
              for cat, leaves in sorted(categories.items())}
    if len(categories) == len(MMLU_CATEGORIES):
        groups["mmlu"] = _group("mmlu", [leaf for leaves in categories.values() for leaf in leaves])
    return {**groups, **results}
