"""CTPO vs GRPO vs GSPO on the CPU demonstration (examples/arith_ctpo.yaml), several seeds, same budget.

For each seed the SFT warm start runs once (``toolgym sft``) and every algorithm starts RL from that same
warm-started model, with the same prompts, rollout seeds, steps and mini-batches per rollout batch
(several, so that the later ones are off-policy and the ratio/clip matter). Only ``algorithm`` differs
(its loss defaults: docs/algorithms/baselines.md). Prints a Markdown table (held-out reward and tool use
before and after, per run, and mean over seeds) and writes a PNG of the eval/train reward curves.

    .venv/bin/python benchmarks/algorithms.py [--seeds 0 1 2] [--algorithms ctpo grpo gspo] [--steps N]
        [--out runs/algorithms] [--set key=value ...] [--reuse] [--one-warm-start] [--title T]

``--one-warm-start`` runs the SFT once (with the first seed) and starts every seed's RL from it, for models
whose warm start costs more than the RL runs (SmolLM2 on CPU); seeds then differ in RL sampling only.
Besides the final reward, the table has each eval step's mean, the paired difference of the mean held-out
reward over all evaluations after RL started (how fast, not only where it ends), and for MOPD runs the
per-step teacher-minus-student log-prob and context fractions (with a plot).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from toolgym.training.outputs.logging import read_metrics
from toolgym.training.outputs.plot import plot_curves

TOOLGYM = str(Path(sys.executable).parent / "toolgym")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="examples/arith_ctpo.yaml")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--algorithms", nargs="+", default=["ctpo", "grpo", "gspo"])
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--out", default="runs/algorithms")
    ap.add_argument("--set", dest="sets", nargs="*", default=[])
    ap.add_argument("--one-warm-start", action="store_true",
                    help="one SFT warm start (first seed) shared by every seed")
    ap.add_argument("--warm-from", default=None,
                    help="folder holding the sft-seedN warm starts (default: --out), to share them between sweeps")
    ap.add_argument("--title", default="CTPO vs GRPO vs GSPO (Arith demo)")
    ap.add_argument("--reuse", action="store_true",
                    help="read runs that already finished (summary.json present) instead of training them again, "
                         "e.g. to tabulate seeds that ran in separate processes")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    common = list(a.sets) + ([f"steps={a.steps}"] if a.steps else [])
    results = []
    for seed in a.seeds:
        warm_seed = a.seeds[0] if a.one_warm_start else seed
        warm_root = Path(a.warm_from) if a.warm_from else out
        warm = warm_root / f"sft-seed{warm_seed}"
        if not (warm / "config.json").exists():
            subprocess.run([TOOLGYM, "sft", a.config, "--out", str(warm), "-s", f"seed={warm_seed}",
                            "-s", f"output_dir={warm_root / f'sft-seed{warm_seed}-work'}", *sum((["-s", s] for s in a.sets), [])],
                           check=True)
        for alg in a.algorithms:
            run = out / f"{alg}-seed{seed}"
            if a.reuse and (run / "summary.json").exists():
                summary = json.loads((run / "summary.json").read_text())
                results.append({"algorithm": alg, "seed": seed, "before": summary["before"], "after": summary["after"],
                                "metrics": read_metrics(run)})
                print(f"{alg} seed {seed} (reused): {summary['before']['reward_mean']:.3f} -> "
                      f"{summary['after']['reward_mean']:.3f}", flush=True)
                continue
            args = [TOOLGYM, "train", a.config, "--no-progress", "--json", "-o", str(run), "--seed", str(seed),
                    "-s", f"algorithm={alg}", "-s", f"model.name_or_path={warm}", "-s", "sft.enabled=false",
                    "-s", "model.model_kwargs={}"]
            for s in common:
                args += ["-s", s]
            p = subprocess.run(args, capture_output=True, text=True)
            if p.returncode != 0:
                print(p.stderr[-2000:], file=sys.stderr)
                raise SystemExit(f"run {run} failed")
            summary = json.loads(p.stdout.strip().splitlines()[-1])
            results.append({"algorithm": alg, "seed": seed, "before": summary["before"], "after": summary["after"],
                            "metrics": read_metrics(run)})
            print(f"{alg} seed {seed}: {summary['before']['reward_mean']:.3f} -> {summary['after']['reward_mean']:.3f}",
                  flush=True)
    lines = ["| algorithm | seed | eval reward before | eval reward after | tool use before | tool use after | clip frac (mean) |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        tr = [m for m in r["metrics"] if m["kind"] == "train"]
        clip = statistics.mean(m.get("clip_frac", 0.0) for m in tr) if tr else float("nan")
        lines.append(f"| {r['algorithm']} | {r['seed']} | {r['before']['reward_mean']:.3f} | {r['after']['reward_mean']:.3f} | "
                     f"{r['before']['tool_rate']:.2f} | {r['after']['tool_rate']:.2f} | {clip:.3f} |")
    for alg in a.algorithms:
        rs = [r for r in results if r["algorithm"] == alg]
        after = [r["after"]["reward_mean"] for r in rs]
        before = [r["before"]["reward_mean"] for r in rs]
        sd = statistics.stdev(after) if len(after) > 1 else 0.0
        lines.append(f"| **{alg}** | mean of {len(rs)} | {statistics.mean(before):.3f} | {statistics.mean(after):.3f} ± {sd:.3f} | | | |")
    lines += ["", *paired_lines(results, a.algorithms), "", *eval_step_lines(results, a.algorithms),
              "", *paired_lines(results, a.algorithms, key=mean_eval_after_start,
                                what="mean held-out reward over the evals after step 0"),
              "", *distillation_lines(results)]
    table = "\n".join(lines)
    print(table)
    (out / "table.md").write_text(table + "\n")
    curves = {}
    train_curves = {}
    for alg in a.algorithms:
        curves[alg] = [([m["step"] for m in r["metrics"] if m["kind"] == "eval"],
                        [m["reward_mean"] for m in r["metrics"] if m["kind"] == "eval"]) for r in results if r["algorithm"] == alg]
        train_curves[alg] = [([m["step"] for m in r["metrics"] if m["kind"] == "train"],
                              [m["reward_mean"] for m in r["metrics"] if m["kind"] == "train"]) for r in results if r["algorithm"] == alg]
    print("plot:", plot_curves(curves, out / "eval_reward.png", "held-out reward", a.title))
    print("plot:", plot_curves(train_curves, out / "train_reward.png", "rollout reward", "training reward"))
    distilled = [r for r in results if any("mopd/teacher_minus_student_logp" in m for m in r["metrics"])]
    for key, label in DISTILLATION_PLOTS.items():
        if distilled:
            per_alg = {alg: [([m["step"] for m in r["metrics"] if key in m], [m[key] for m in r["metrics"] if key in m])
                             for r in distilled if r["algorithm"] == alg]
                       for alg in sorted({r["algorithm"] for r in distilled})}
            print("plot:", plot_curves(per_alg, out / f"{key.split('/')[-1]}.png", label, a.title))


DISTILLATION_PLOTS = {"mopd/teacher_minus_student_logp": "teacher - student log-prob (nats/token)",
                      "mopd/trained_frac": "fraction of rollouts with a teacher context"}
DISTILLATION_COLUMNS = ("teacher_minus_student_logp", "divergence_mean", "success_group_frac", "primary_frac",
                        "second_frac", "failure_frac", "feedback_frac", "trained_frac", "truncated_frac")


def mean_eval_after_start(r: dict) -> float:
    """Mean held-out reward over the evaluations after RL started: rewards getting there sooner."""
    vals = [m["reward_mean"] for m in r["metrics"] if m["kind"] == "eval" and m["step"] > 0]
    return statistics.mean(vals) if vals else r["after"]["reward_mean"]


def eval_step_lines(results: list[dict], algorithms: list[str]) -> list[str]:
    """Held-out reward at every evaluation step, mean ± sd over seeds."""
    steps = sorted({m["step"] for r in results for m in r["metrics"] if m["kind"] == "eval"})
    out = ["| algorithm | " + " | ".join(f"eval step {s}" for s in steps) + " |", "|---|" + "---|" * len(steps)]
    for alg in algorithms:
        cells = []
        for s in steps:
            vals = [m["reward_mean"] for r in results if r["algorithm"] == alg for m in r["metrics"]
                    if m["kind"] == "eval" and m["step"] == s]
            sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
            cells.append(f"{statistics.mean(vals):.3f} ± {sd:.3f}" if vals else "–")
        out.append(f"| {alg} | " + " | ".join(cells) + " |")
    return out


def distillation_lines(results: list[dict]) -> list[str]:
    """Per step, mean over seeds: what the distillation teacher saw and how far it was from the student."""
    rows = [(r["algorithm"], m) for r in results for m in r["metrics"]
            if m["kind"] == "train" and "mopd/teacher_minus_student_logp" in m]
    if not rows:
        return []
    out = ["| algorithm | step | " + " | ".join(DISTILLATION_COLUMNS) + " |",
           "|---|---|" + "---|" * len(DISTILLATION_COLUMNS)]
    for alg, step in sorted({(a, m["step"]) for a, m in rows}):
        ms = [m for a, m in rows if a == alg and m["step"] == step]
        cells = [f"{statistics.mean(m.get('mopd/' + c, float('nan')) for m in ms):.3f}" for c in DISTILLATION_COLUMNS]
        out.append(f"| {alg} | {step} | " + " | ".join(cells) + " |")
    return out


def sign_test_p(wins: int, losses: int) -> float:
    """Exact two-sided sign test (ties dropped): how often a fair coin is at least this lopsided."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


def paired_lines(results: list[dict], algorithms: list[str], key: Any = None, what: str = "reward after") -> list[str]:
    """Each algorithm against the first on the same seeds (same warm start, prompts and rollout seeds)."""
    after = {(r["algorithm"], r["seed"]): (key(r) if key else r["after"]["reward_mean"]) for r in results}
    base = algorithms[0]
    out = [f"| paired on the same seeds | mean diff of {what} (± sd) | {base} lower / tie / higher | sign test p |",
           "|---|---|---|---|"]
    for alg in algorithms[1:]:
        seeds = sorted(s for (a, s) in after if a == alg and (base, s) in after)
        diffs = [after[(alg, s)] - after[(base, s)] for s in seeds]
        if not diffs:
            continue
        wins = sum(d > 0 for d in diffs)
        losses = sum(d < 0 for d in diffs)
        sd = statistics.stdev(diffs) if len(diffs) > 1 else 0.0
        out.append(f"| {alg} - {base} ({len(diffs)} seeds) | {statistics.mean(diffs):+.3f} ± {sd:.3f} | "
                   f"{wins} / {len(diffs) - wins - losses} / {losses} | {sign_test_p(wins, losses):.3f} |")
    return out


if __name__ == "__main__":
    main()
