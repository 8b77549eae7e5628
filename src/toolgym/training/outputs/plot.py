"""PNG of a run's training reward and held-out evaluation curves (matplotlib, headless)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def env_names(records: Sequence[dict[str, Any]]) -> list[str]:
    """The environments of a several-environment run, from its ``reward_mean/NAME`` keys, in first-seen order."""
    return list(dict.fromkeys(k.split("/", 1)[1] for r in records for k in r if k.startswith("reward_mean/")))


def _per_env(ax: Any, records: Sequence[dict[str, Any]], **style: Any) -> None:
    for name in env_names(records):
        rows = [r for r in records if f"reward_mean/{name}" in r]
        ax.plot([r["step"] for r in rows], [r[f"reward_mean/{name}"] for r in rows], linestyle="--",
                label=f"reward: {name}", **style)


def plot_run(metrics: Sequence[dict[str, Any]], path: str | Path, title: str = "") -> Path:
    """Train reward per step (and tool-use rate) on the left; eval reward per eval on the right; a run on several
    environments adds each one's reward (dashed) to both."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [r for r in metrics if r.get("kind") == "train"]
    ev = [r for r in metrics if r.get("kind") == "eval"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    ax = axes[0]
    if train:
        ax.plot([r["step"] for r in train], [r.get("reward_mean") for r in train], label="train reward")
        if any("tool_rate" in r for r in train):
            ax.plot([r["step"] for r in train], [r.get("tool_rate") for r in train], label="tool-use rate", alpha=0.7)
        _per_env(ax, train)
    ax.set_xlabel("step")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("rollouts")
    ax.legend(loc="best" if env_names(train) else "lower right")  # several environments: more lines to keep clear
    ax = axes[1]
    if ev:
        ax.plot([r["step"] for r in ev], [r.get("reward_mean") for r in ev], marker="o", label="eval reward")
        ax.plot([r["step"] for r in ev], [r.get("tool_rate") for r in ev], marker=".", alpha=0.7, label="eval tool-use rate")
        _per_env(ax, ev, marker="o")
    ax.set_xlabel("step")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("held-out evaluation")
    ax.legend(loc="best" if env_names(ev) else "lower right")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def mean_band(ys: Any) -> tuple[Any, Any, Any]:
    """Mean over seeds (rows) and a band of one standard error of that mean (zero width for one seed).

    Why not min/max: with ten seeds the extremes of a noisy task cover almost the whole axis and hide
    the difference between methods that a paired comparison over the same seeds does show.
    """
    import numpy as np

    ys = np.asarray(ys, dtype=float)
    mean = ys.mean(0)
    sem = ys.std(0, ddof=1) / np.sqrt(len(ys)) if len(ys) > 1 else np.zeros_like(mean)
    return mean, mean - sem, mean + sem


def plot_curves(curves: dict[str, list[tuple[list[float], list[float]]]], path: str | Path, ylabel: str, title: str = "") -> Path:
    """Mean ± one standard error over seeds for each named method; each curve is (xs, ys) per seed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, runs in curves.items():
        if not runs:
            continue
        xs = runs[0][0]
        n = min(len(r[1]) for r in runs)
        ys = np.array([r[1][:n] for r in runs], dtype=float)
        mean, lo, hi = mean_band(ys)
        ax.plot(xs[:n], mean, label=f"{name} (mean ± s.e., n={len(runs)})")
        ax.fill_between(xs[:n], lo, hi, alpha=0.2)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_ylim(-0.02, 1.02)
    if title:
        ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
