"""CTPO vs GRPO vs GSPO on the CPU demonstration (examples/arith_ctpo.yaml), several seeds, same budget.

For each seed the SFT warm start runs once (``toolgym sft``) and every algorithm starts RL from that same
warm-started model, with the same prompts, rollout seeds, steps and mini-batches per rollout batch
(several, so that the later ones are off-policy and the ratio/clip matter). Only ``algorithm`` differs
(its loss defaults: docs/algorithms/baselines.md). Prints a Markdown table (held-out reward and tool use
before and after, per run, and mean over seeds) and writes a PNG of the eval/train reward curves.

    .venv/bin/python benchmarks/algorithms.py [--seeds 0 1 2] [--algorithms ctpo grpo gspo] [--steps N]
        [--out runs/algorithms] [--set key=value ...] [--reuse]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

from toolgym.training.logging import read_metrics
from toolgym.training.plot import plot_curves

TOOLGYM = str(Path(sys.executable).parent / "toolgym")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="examples/arith_ctpo.yaml")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--algorithms", nargs="+", default=["ctpo", "grpo", "gspo"])
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--out", default="runs/algorithms")
    ap.add_argument("--set", dest="sets", nargs="*", default=[])
    ap.add_argument("--reuse", action="store_true",
                    help="read runs that already finished (summary.json present) instead of training them again, "
                         "e.g. to tabulate seeds that ran in separate processes")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    common = list(a.sets) + ([f"steps={a.steps}"] if a.steps else [])
    results = []
    for seed in a.seeds:
        warm = out / f"sft-seed{seed}"
        if not (warm / "config.json").exists():
            subprocess.run([TOOLGYM, "sft", a.config, "--out", str(warm), "-s", f"seed={seed}",
                            "-s", f"output_dir={out / f'sft-seed{seed}-work'}", *sum((["-s", s] for s in a.sets), [])],
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
    lines += ["", *paired_lines(results, a.algorithms)]
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
    print("plot:", plot_curves(curves, out / "eval_reward.png", "held-out reward", "CTPO vs GRPO vs GSPO (Arith demo)"))
    print("plot:", plot_curves(train_curves, out / "train_reward.png", "rollout reward", "training reward"))


def sign_test_p(wins: int, losses: int) -> float:
    """Exact two-sided sign test (ties dropped): how often a fair coin is at least this lopsided."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


def paired_lines(results: list[dict], algorithms: list[str]) -> list[str]:
    """Each algorithm against the first on the same seeds (same warm start, prompts and rollout seeds)."""
    after = {(r["algorithm"], r["seed"]): r["after"]["reward_mean"] for r in results}
    base = algorithms[0]
    out = [f"| paired on the same seeds | mean diff of reward after (± sd) | {base} lower / tie / higher | sign test p |",
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
