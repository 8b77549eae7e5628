"""Teacher-signal alignment analysis (docs/algorithms/mopd.md, "Teacher-signal analysis").

Does a peer context make a frozen teacher's score of a response track the verifier reward?
For each (prompt, response, condition) a causal LM scores the response under a raw-text context
(mean token log-prob); metrics are computed per prompt and averaged over prompts with
prompt-level bootstrap intervals. Metrics are pure NumPy; torch loads only for scoring.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from toolgym.training.algorithms.distillation.peers import (
    H_FAILURE,
    H_PEER,
    H_SUCCESS,
    H_SUCCESS_2,
    TEMPLATE_STRINGS,
    Section,
    TeacherContext,
    render_teacher_text,
    select_peers,
)

# ---------------------------------------------------------------------------------------------
# Per-prompt metrics. s: teacher scores, r: rewards, z: success indicators (r >= threshold).


def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    i, j = np.triu_indices(n, k=1)
    return i, j


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean rank)."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), dtype=float)
    sx = x[order]
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sx[j + 1] == sx[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def _pearson(a: np.ndarray, b: np.ndarray) -> float | None:
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    a, b = a - a.mean(), b - b.mean()
    return float((a * b).sum() / math.sqrt((a * a).sum() * (b * b).sum()))


def spearman(s: Sequence[float], r: Sequence[float]) -> float:
    """Pearson correlation of average ranks; 0 when n < 2 or either side is constant."""
    s_, r_ = np.asarray(s, float), np.asarray(r, float)
    v = _pearson(_ranks(s_), _ranks(r_)) if len(s_) >= 2 else None
    return 0.0 if v is None else v


def _concordance(s: Sequence[float], r: Sequence[float]) -> tuple[int, int, int, int]:
    """(concordant, discordant, pairs tied only in s, pairs tied only in r)."""
    s_, r_ = np.asarray(s, float), np.asarray(r, float)
    i, j = _pairs(len(s_))
    ds, dr = np.sign(s_[i] - s_[j]), np.sign(r_[i] - r_[j])
    prod = ds * dr
    return (int((prod > 0).sum()), int((prod < 0).sum()), int(((ds == 0) & (dr != 0)).sum()),
            int(((dr == 0) & (ds != 0)).sum()))


def goodman_kruskal_gamma(s: Sequence[float], r: Sequence[float]) -> float | None:
    """(C - D) / (C + D), every pair tied in s or r skipped. The reference code calls this
    "Kendall tau"; it is not tau-b. None when no untied pair exists."""
    c, d, _, _ = _concordance(s, r)
    return None if c + d == 0 else (c - d) / (c + d)


def kendall_tau_b(s: Sequence[float], r: Sequence[float]) -> float | None:
    """Kendall's tau-b: (C - D) / sqrt((n0 - n1)(n0 - n2)), corrected for ties on each side."""
    c, d, tied_only_s, tied_only_r = _concordance(s, r)
    untied_s = c + d + tied_only_r  # pairs not tied in s
    untied_r = c + d + tied_only_s  # pairs not tied in r
    if untied_s == 0 or untied_r == 0:
        return None
    return (c - d) / math.sqrt(untied_s * untied_r)


def pairwise_accuracy(s: Sequence[float], r: Sequence[float]) -> float | None:
    """Over pairs with r_i != r_j, the share ordered the same way by s (a score tie is wrong)."""
    s_, r_ = np.asarray(s, float), np.asarray(r, float)
    i, j = _pairs(len(s_))
    keep = r_[i] != r_[j]
    if not keep.any():
        return None
    ok = np.sign(s_[i] - s_[j])[keep] == np.sign(r_[i] - r_[j])[keep]
    return float(ok.mean())


def success_auc(s: Sequence[float], z: Sequence[int]) -> float | None:
    """Mann-Whitney AUC over success x failure pairs, ties 0.5. None for a single-class prompt
    (the reference code returns 0.0 there; such prompts are excluded instead)."""
    s_, z_ = np.asarray(s, float), np.asarray(z, bool)
    pos, neg = s_[z_], s_[~z_]
    if len(pos) == 0 or len(neg) == 0:
        return None
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0) + 0.5 * (diff == 0)).mean())


def point_biserial(s: Sequence[float], z: Sequence[int]) -> float | None:
    """Pearson correlation between the score and the success indicator."""
    return _pearson(np.asarray(s, float), np.asarray(z, float))


def brier_sigmoid(s: Sequence[float], z: Sequence[int]) -> float:
    p = 1.0 / (1.0 + np.exp(-np.asarray(s, float)))
    return float(((p - np.asarray(z, float)) ** 2).mean())


def brier_minmax(s: Sequence[float], z: Sequence[int]) -> float:
    s_ = np.asarray(s, float)
    p = np.full_like(s_, 0.5) if np.ptp(s_) == 0 else (s_ - s_.min()) / np.ptp(s_)
    return float(((p - np.asarray(z, float)) ** 2).mean())


def top1_hit(s: Sequence[float], r: Sequence[float], z: Sequence[int]) -> float:
    """1 if the top-scored response has the maximal reward or is a success."""
    k = int(np.argmax(np.asarray(s, float)))
    return float(r[k] == max(r) or bool(z[k]))


METRICS: list[tuple[str, str]] = [
    ("spearman", "Spearman ρ"),
    ("kendall_tau_b", "Kendall τ-b"),
    ("gk_gamma", "Goodman–Kruskal γ"),
    ("pairwise_acc", "pairwise acc."),
    ("success_auc", "success AUC"),
    ("point_biserial", "point-biserial"),
    ("brier_sigmoid", "Brier σ(s)"),
    ("brier_minmax", "Brier minmax(s)"),
    ("top1_hit", "top-1 hit"),
]
HEADLINE = ["spearman", "kendall_tau_b", "gk_gamma", "pairwise_acc", "success_auc", "point_biserial"]


def prompt_metrics(s: Sequence[float], r: Sequence[float], threshold: float = 1.0) -> dict[str, float | None] | None:
    """All metrics for one prompt; None when it has fewer than 2 responses (skipped)."""
    if len(s) != len(r):
        raise ValueError(f"{len(s)} scores but {len(r)} rewards")
    if len(s) < 2:
        return None
    z = [int(x >= threshold) for x in r]
    return {
        "spearman": spearman(s, r),
        "kendall_tau_b": kendall_tau_b(s, r),
        "gk_gamma": goodman_kruskal_gamma(s, r),
        "pairwise_acc": pairwise_accuracy(s, r),
        "success_auc": success_auc(s, z),
        "point_biserial": point_biserial(s, z),
        "brier_sigmoid": brier_sigmoid(s, z),
        "brier_minmax": brier_minmax(s, z),
        "top1_hit": top1_hit(s, r, z),
    }


def bootstrap_ci(values: Sequence[float], n_boot: int = 2000, seed: int = 12345,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile interval (linear interpolation) of the mean, resampling prompts with replacement."""
    v = np.asarray(values, float)
    if len(v) == 0:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, len(v), size=(n_boot, len(v)))].mean(axis=1)
    lo, hi = np.percentile(means, [100 * (1 - level) / 2, 100 * (1 + level) / 2], method="linear")
    return float(lo), float(hi)


def aggregate(per_prompt: Sequence[dict[str, float | None]], n_boot: int = 2000,
              seed: int = 12345) -> dict[str, dict[str, float]]:
    """Mean over prompts (undefined values excluded per metric) with a bootstrap 95% CI."""
    out: dict[str, dict[str, float]] = {}
    for key, _ in METRICS:
        vals = [m[key] for m in per_prompt if m.get(key) is not None]
        lo, hi = bootstrap_ci(vals, n_boot, seed)  # type: ignore[arg-type]
        out[key] = {"mean": float(np.mean(vals)) if vals else math.nan, "lo": lo, "hi": hi, "n": len(vals)}
    return out


# ---------------------------------------------------------------------------------------------
# Contexts per condition (raw text, self-excluding, the first failure: deterministic).

CONDITIONS: dict[str, str] = {
    "none": "question only",
    "S1": "primary success",
    "S2": "second success",
    "F": "failure only",
    "1S1F": "primary success + failure",
    "2S": "two successes: positive",
    "2S1F": "two successes + failure: contrastive, MOPD",
    "random": "one random peer, labels ignored: control",
    "score_top3": "top-3 peers by verifier score, unlabelled: control",
}


def condition_context(
    condition: str, problem: str, texts: Sequence[str], rewards: Sequence[float], index: int,
    threshold: float = 1.0, seed: int = 0,
) -> TeacherContext | None:
    """The context of ``condition`` for response ``index``, or None when a required section is missing."""
    sel = select_peers(rewards, index, "contrastive", threshold, failure="first")
    p = sel.successes[0] if sel.successes else None
    a = sel.successes[1] if len(sel.successes) > 1 else None
    f = sel.failures[0] if sel.failures else None
    others = [j for j in range(len(texts)) if j != index]

    def sec(h: str, j: int | None, kind: str) -> Section | None:
        return None if j is None else Section(h, texts[j], kind)

    want: list[Section | None]
    if condition == "none":
        want = []
    elif condition == "S1":
        want = [sec(H_SUCCESS, p, "success")]
    elif condition == "S2":
        want = [sec(H_SUCCESS, a, "success")]
    elif condition == "F":
        want = [sec(H_FAILURE, f, "failure")]
    elif condition == "1S1F":
        want = [sec(H_SUCCESS, p, "success"), sec(H_FAILURE, f, "failure")]
    elif condition == "2S":
        want = [sec(H_SUCCESS, p, "success"), sec(H_SUCCESS_2, a, "success_2")]
    elif condition == "2S1F":
        want = [sec(H_SUCCESS, p, "success"), sec(H_SUCCESS_2, a, "success_2"), sec(H_FAILURE, f, "failure")]
    elif condition == "random":
        j = random.Random(f"{seed}|{problem}|{index}").choice(others) if others else None
        want = [sec(H_PEER, j, "peer")]
    elif condition == "score_top3":
        ranked = sorted(others, key=lambda j: -rewards[j])[:3]
        want = [sec(H_PEER, j, "peer") for j in ranked] or [None]
    else:
        raise ValueError(f"unknown condition {condition!r}; known: {', '.join(CONDITIONS)}")
    if any(w is None for w in want):
        return None
    return TeacherContext(problem, [w for w in want if w is not None], sel)


# ---------------------------------------------------------------------------------------------
# Teacher scoring with a causal LM.


@dataclass
class Score:
    mean_logprob: float
    sum_logprob: float
    n_tokens: int
    context_truncated: bool


def score_responses(
    model: Any, tokenizer: Any, pairs: Sequence[tuple[str, str]], *, max_len: int = 8192,
    batch_size: int = 8, progress: Callable[[int], None] | None = None,
) -> list[Score]:
    """Score each response under its context: tokenise both separately, BOS first if the tokenizer
    has one, left-truncate the context when the total exceeds ``max_len``; the score is the mean
    token log-prob of the response (the sum is kept too)."""
    import torch

    from toolgym.training.algorithms.distillation.batch import build_batch, response_logits, token_logprobs

    bos = [tokenizer.bos_token_id] if getattr(tokenizer, "bos_token_id", None) is not None else []
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    enc: list[tuple[list[int], list[int], bool]] = []
    for ctx, resp in pairs:
        c = list(tokenizer(ctx, add_special_tokens=False)["input_ids"])
        y = list(tokenizer(resp, add_special_tokens=False)["input_ids"])[: max(max_len - len(bos) - 1, 0)]
        room = max_len - len(bos) - len(y)
        cut = len(c) > room
        c = c[len(c) - room :] if cut else c
        enc.append((bos + c, y, cut))
    out: list[Score | None] = [None] * len(enc)
    order = sorted(range(len(enc)), key=lambda k: len(enc[k][0]) + len(enc[k][1]))
    model.eval()
    done = 0
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        prompts = [enc[k][0] if enc[k][0] else [pad] for k in rows]
        batch = build_batch(prompts, [enc[k][1] for k in rows], pad).to(next(model.parameters()).device)
        with torch.no_grad():
            lp = token_logprobs(response_logits(model, batch).float(), batch.response_ids)
        lp = (lp * batch.response_mask).double()
        for b, k in enumerate(rows):
            n = len(enc[k][1])
            total = float(lp[b].sum())
            out[k] = Score(total / n if n else 0.0, total, n, enc[k][2])
        done += len(rows)
        if progress:
            progress(done)
    return [s for s in out if s is not None]


# ---------------------------------------------------------------------------------------------
# The analysis over a rollout file.


@dataclass
class PromptGroup:
    task_id: str
    problem: str
    texts: list[str]
    rewards: list[float]


@dataclass
class AnalysisResult:
    settings: dict[str, Any]
    counts: dict[str, int]
    table: dict[str, dict[str, dict[str, float]]]  # condition -> metric -> {mean, lo, hi, n}
    rows: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"settings": self.settings, "counts": self.counts, "table": self.table}


def response_text(turns: Sequence[dict[str, Any]]) -> str | None:
    """The response as text from a trajectory's turns: everything from the first assistant message
    on (tool and environment messages included, labelled by role); None if there is none."""
    start = next((k for k, m in enumerate(turns) if m.get("role") == "assistant"), None)
    if start is None:
        return None
    parts = []
    for m in turns[start:]:
        content = str(m.get("content") or "")
        parts.append(content if m.get("role") == "assistant" else f"[{m.get('role')}]\n{content}")
    return "\n".join(parts)


def problem_text(turns: Sequence[dict[str, Any]]) -> str | None:
    """The last user message before the first assistant message (the problem x)."""
    user = None
    for m in turns:
        if m.get("role") == "assistant":
            break
        if m.get("role") == "user":
            user = str(m.get("content") or "")
    return user


def groups_from_trajectories(trajectories: Sequence[Any], decode: Callable[[list[int]], str] | None = None,
                             text_from: str = "auto") -> list[PromptGroup]:
    """Group ``Trajectory`` records by task_id (file order kept). Text comes from ``turns``
    (``text_from="turns"``), from decoding the token ids (``"ids"``, needs ``decode``), or from
    turns when they hold an assistant message and the ids otherwise (``"auto"``)."""
    if text_from not in ("auto", "turns", "ids"):
        raise ValueError(f"text_from must be 'auto', 'turns' or 'ids', got {text_from!r}")
    out: dict[str, PromptGroup] = {}
    for t in trajectories:
        resp = response_text(t.turns) if text_from != "ids" else None
        prob = problem_text(t.turns) if text_from != "ids" else None
        if resp is None or prob is None:
            if decode is None or text_from == "turns":
                raise ValueError(f"trajectory {t.task_id}: no assistant/user turns to read the text from")
            resp = resp if resp is not None else decode(list(t.response_ids))
            prob = prob if prob is not None else str(t.metadata.get("problem") or decode(list(t.prompt_ids)))
        g = out.setdefault(t.task_id, PromptGroup(t.task_id, prob, [], []))
        g.texts.append(resp)
        g.rewards.append(float(t.reward))
    return list(out.values())


def bucket(successes: int) -> str:
    return "easy" if successes >= 4 else ("medium" if successes >= 1 else "hard")


def sample_prompts(groups: Sequence[PromptGroup], max_prompts: int = 300, max_responses: int = 8,
                   threshold: float = 1.0, seed: int = 0) -> list[PromptGroup]:
    """Keep prompts with >= 2 responses (first ``max_responses``), then sample evenly across the
    easy / medium / hard buckets up to ``max_prompts``."""
    kept = [PromptGroup(g.task_id, g.problem, g.texts[:max_responses], g.rewards[:max_responses])
            for g in groups if len(g.texts) >= 2]
    buckets: dict[str, list[PromptGroup]] = {"easy": [], "medium": [], "hard": []}
    for g in kept:
        buckets[bucket(sum(r >= threshold for r in g.rewards))].append(g)
    rng = random.Random(seed)
    for b in buckets.values():
        rng.shuffle(b)
    out: list[PromptGroup] = []
    while len(out) < max_prompts and any(buckets.values()):
        for name in ("easy", "medium", "hard"):
            if buckets[name] and len(out) < max_prompts:
                out.append(buckets[name].pop())
    return sorted(out, key=lambda g: g.task_id)


def analyze(
    groups: Sequence[PromptGroup], score_fn: Callable[[list[tuple[str, str]]], list[Score]], *,
    conditions: Sequence[str] = tuple(CONDITIONS), threshold: float = 1.0, n_boot: int = 2000,
    boot_seed: int = 12345, seed: int = 0,
) -> AnalysisResult:
    """Score every (prompt, response, condition) with a present context and build the table over
    prompts with both outcomes, counting for each condition only the rows whose required sections
    were present (a prompt enters a condition's mean when both outcomes remain among those rows)."""
    rows: list[dict[str, Any]] = []
    pairs: list[tuple[str, str]] = []
    for g in groups:
        for i, text in enumerate(g.texts):
            for cond in conditions:
                ctx = condition_context(cond, g.problem, g.texts, g.rewards, i, threshold, seed)
                if ctx is None:
                    continue
                rows.append({"task_id": g.task_id, "index": i, "condition": cond, "reward": g.rewards[i]})
                pairs.append((render_teacher_text(ctx), text))
    uniq: dict[tuple[str, str], int] = {}
    for pr in pairs:
        uniq.setdefault(pr, len(uniq))
    unique_scores = score_fn(list(uniq))  # identical (context, response) pairs are scored once
    scores = [unique_scores[uniq[pr]] for pr in pairs]
    for row, sc in zip(rows, scores, strict=True):
        row.update(score=sc.mean_logprob, sum_logprob=sc.sum_logprob, n_tokens=sc.n_tokens,
                   context_truncated=sc.context_truncated)
    both = {g.task_id for g in groups if 0 < sum(r >= threshold for r in g.rewards) < len(g.rewards)}
    table: dict[str, dict[str, dict[str, float]]] = {}
    for cond in conditions:
        per_prompt = []
        for tid in sorted(both):
            rs = [x for x in rows if x["task_id"] == tid and x["condition"] == cond]
            z = {x["reward"] >= threshold for x in rs}
            if z != {True, False}:
                continue  # both outcomes must survive the restriction to rows with the context present
            m = prompt_metrics([x["score"] for x in rs], [x["reward"] for x in rs], threshold)
            if m is not None:
                per_prompt.append(m)
        table[cond] = aggregate(per_prompt, n_boot, boot_seed)
        table[cond]["prompts"] = {"mean": float(len(per_prompt)), "lo": math.nan, "hi": math.nan,
                                  "n": len(per_prompt)}
    counts = {
        "prompts": len(groups),
        "prompts_both_outcomes": len(both),
        "responses": sum(len(g.texts) for g in groups),
        "scored_rows": len(rows),
        "context_truncated_rows": sum(bool(r["context_truncated"]) for r in rows),
    }
    settings = {"threshold": threshold, "n_boot": n_boot, "boot_seed": boot_seed,
                "ci": "percentile, linear interpolation, 95%", "conditions": dict(CONDITIONS),
                "template": TEMPLATE_STRINGS, "score": "mean token log-prob of the response"}
    return AnalysisResult(settings, counts, table, rows)


# ---------------------------------------------------------------------------------------------
# Reports.


def _fmt(cell: dict[str, float]) -> str:
    if cell["n"] == 0 or math.isnan(cell["mean"]):
        return "–"
    return f"{cell['mean']:.3f} [{cell['lo']:.3f}, {cell['hi']:.3f}]"


def markdown_table(result: AnalysisResult) -> str:
    """Rows: conditions; columns: every metric as mean [95% CI] over prompts with both outcomes."""
    head = ["condition", "prompts"] + [label for _, label in METRICS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cond, cells in result.table.items():
        vals = [f"{cond} ({CONDITIONS.get(cond, cond)})", str(cells["prompts"]["n"])]
        vals += [_fmt(cells[key]) for key, _ in METRICS]
        lines.append("| " + " | ".join(vals) + " |")
    c = result.counts
    note = (f"\nPrompts with both outcomes: {c['prompts_both_outcomes']} of {c['prompts']}; "
            f"{c['scored_rows']} scored (response, condition) rows, {c['context_truncated_rows']} with a "
            "left-truncated context. Mean over prompts; bootstrap 95% CI over prompts "
            f"({result.settings['n_boot']} resamples, seed {result.settings['boot_seed']}, percentile). "
            "Goodman–Kruskal γ is what the reference code reports as \"Kendall τ\"; τ-b is shown beside it.\n")
    return "\n".join(lines) + "\n" + note


def plot(result: AnalysisResult, path: str | Path) -> None:
    """Grouped bars of the headline metrics per condition with CI error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    conds = list(result.table)
    labels = dict(METRICS)
    fig, ax = plt.subplots(figsize=(max(8, 1.4 * len(conds)), 4.5))
    width = 0.8 / len(HEADLINE)
    for k, key in enumerate(HEADLINE):
        xs, ys, err = [], [], [[], []]
        for c_i, cond in enumerate(conds):
            cell = result.table[cond][key]
            if cell["n"] == 0 or math.isnan(cell["mean"]):
                continue
            xs.append(c_i + (k - (len(HEADLINE) - 1) / 2) * width)
            ys.append(cell["mean"])
            err[0].append(max(cell["mean"] - cell["lo"], 0.0))
            err[1].append(max(cell["hi"] - cell["mean"], 0.0))
        ax.bar(xs, ys, width, yerr=err, capsize=2, label=labels[key])
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xticks(range(len(conds)), [f"{c}\n({result.table[c]['prompts']['n']} prompts)" for c in conds])
    ax.set_ylabel("mean over prompts (95% CI)")
    ax.set_title(f"Teacher-signal alignment ({result.counts['prompts_both_outcomes']} prompts with both outcomes)")
    ax.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_reports(result: AnalysisResult, out_dir: str | Path) -> dict[str, str]:
    """teacher_signal.md, .png, .json and the per-row scores.jsonl under ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {k: str(out / n) for k, n in [("markdown", "teacher_signal.md"), ("plot", "teacher_signal.png"),
                                          ("json", "teacher_signal.json"), ("rows", "scores.jsonl")]}
    Path(paths["markdown"]).write_text("# Teacher-signal alignment\n\n" + markdown_table(result))
    plot(result, paths["plot"])
    Path(paths["json"]).write_text(json.dumps(result.to_json(), indent=2, allow_nan=True))
    with open(paths["rows"], "w") as f:
        for r in result.rows:
            f.write(json.dumps(r) + "\n")
    return paths

