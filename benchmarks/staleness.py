"""CTPO vs GRPO vs GSPO trained on stale rollouts: ``rollout.max_staleness`` 0, 2 and 4, three seeds each.

    .venv/bin/python benchmarks/staleness.py [--staleness 0 2 4] [--seeds 0 1 2] [--steps 16]
        [--out runs/staleness] [--config examples/arith_ctpo.yaml] [--set key=value ...]

Every sweep is ``benchmarks/algorithms.py`` (one SFT warm start per seed, or with ``--one-warm-start`` one for
all, shared by every algorithm and every staleness, so runs of a seed see the same prompts and rollout seeds); staleness >= 1 runs one rollout worker
sampling that many steps ahead. Prints, per staleness and algorithm, the held-out reward at the end and its mean
over the evaluations after step 0 (mean ± sd over seeds), the clip fraction, the mismatch weight and the
groups dropped as too stale, and writes ``held_out_by_staleness.png`` (mean held-out reward against step, one
panel per staleness, a band of ± one sd over seeds).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from toolgym.training.outputs.logging import read_metrics

HERE = Path(__file__).parent


def mean_sd(vals: list[float]) -> str:
    vals = [v for v in vals if v == v]
    if not vals:
        return "–"
    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
    return f"{statistics.mean(vals):.3f} ± {sd:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="examples/arith_ctpo.yaml")
    ap.add_argument("--staleness", type=int, nargs="+", default=[0, 2, 4])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--algorithms", nargs="+", default=["ctpo", "grpo", "gspo"])
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--out", default="runs/staleness")
    ap.add_argument("--set", dest="sets", nargs="*", default=[])
    ap.add_argument("--one-warm-start", action="store_true",
                    help="one SFT warm start (first seed) for every seed: seeds then differ in RL sampling only")
    a = ap.parse_args()
    out = Path(a.out)
    for i, seed in enumerate(a.seeds):  # seed by seed, so an interrupted sweep still covers every staleness
        for k in a.staleness:
            sets = [*a.sets, f"rollout.max_staleness={k}", f"rollout.workers={1 if k else 0}",
                    f"loss.mismatch_weight={'true' if k else 'false'}"]  # as the default sets it at each K
            warm = ["--one-warm-start", "--seeds", str(a.seeds[0]), *map(str, a.seeds[1 : i + 1])] \
                if a.one_warm_start else ["--seeds", str(seed)]
            subprocess.run([sys.executable, str(HERE / "algorithms.py"), "--config", a.config, "--algorithms",
                            *a.algorithms, *warm, "--steps", str(a.steps), "--out", str(out / f"k{k}"),
                            "--warm-from", str(out), "--reuse", "--title", f"max_staleness {k}", "--set", *sets],
                           check=True, stdout=subprocess.DEVNULL)
    lines = ["| staleness | algorithm | held-out reward after | mean held-out reward after step 0 | clip frac | "
             "mismatch weight | groups dropped |", "|---|---|---|---|---|---|---|"]
    curves: dict[int, dict[str, list[tuple[list[int], list[float]]]]] = {}
    for k in a.staleness:
        curves[k] = {}
        for alg in a.algorithms:
            runs = [read_metrics(out / f"k{k}" / f"{alg}-seed{s}") for s in a.seeds]
            evals = [[m for m in r if m["kind"] == "eval"] for r in runs]
            train = [[m for m in r if m["kind"] == "train"] for r in runs]
            after = [e[-1]["reward_mean"] for e in evals]
            auc = [statistics.mean(m["reward_mean"] for m in e if m["step"] > 0) for e in evals]
            clip = [statistics.mean(m.get("clip_frac", 0.0) for m in t) for t in train]
            weight = [statistics.mean(m.get("mismatch_weight_mean", float("nan")) for m in t) for t in train]
            dropped = sum(m.get("groups_dropped_stale", 0.0) for t in train for m in t)
            lines.append(f"| {k} | {alg} | {mean_sd(after)} | {mean_sd(auc)} | {mean_sd(clip)} | {mean_sd(weight)} | "
                         f"{dropped:.0f} |")
            curves[k][alg] = [([m["step"] for m in e], [m["reward_mean"] for m in e]) for e in evals]
    table = "\n".join(lines)
    print(table)
    (out / "table.md").write_text(table + "\n")
    print("plot:", plot(curves, out / "held_out_by_staleness.png"))


def plot(curves: dict[int, dict[str, list[tuple[list[int], list[float]]]]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(4.2 * len(curves), 3.4), sharey=True, squeeze=False)
    for ax, (k, per_alg) in zip(axes[0], curves.items(), strict=True):
        for alg, runs in per_alg.items():
            steps = runs[0][0]
            vals = [[r[1][i] for r in runs if i < len(r[1])] for i in range(len(steps))]
            mean = [statistics.mean(v) for v in vals]
            sd = [statistics.stdev(v) if len(v) > 1 else 0.0 for v in vals]
            ax.plot(steps, mean, marker="o", label=alg)
            ax.fill_between(steps, [m - s for m, s in zip(mean, sd, strict=True)],
                            [m + s for m, s in zip(mean, sd, strict=True)], alpha=0.2)
        ax.set_title(f"max_staleness {k}")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("held-out reward (mean ± sd over seeds)")
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


if __name__ == "__main__":
    main()
