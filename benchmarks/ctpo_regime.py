"""CTPO in its own regime: many decisions over long multi-turn responses (examples/arith_parts.yaml), CTPO vs GRPO
vs GSPO, each at its best learning rate from a small grid, then the fixed-window and token-ratio ablations.

Protocol (every run is ``benchmarks/algorithms.py``, so one SFT warm start per seed is shared by all runs of
that seed, and runs of one seed see the same prompts and rollout seeds):
1. grid: every algorithm at every learning rate on the tuning seeds;
2. each algorithm's best learning rate is the one with the highest mean held-out reward over the evals after
   step 0 on the tuning seeds (selection is on these seeds, so their numbers are optimistic);
3. each algorithm at its best rate on the extra seeds too, and the paired comparison over all seeds;
4. the ablations at CTPO's best rate on all seeds: the cumulative ratio under GRPO's fixed window, and the
   token ratio under CTPO's adaptive window.

    .venv/bin/python benchmarks/ctpo_regime.py [--lrs 2.5e-4 5e-4 1e-3] [--tuning-seeds 0 1 2] [--extra-seeds 3 4]
        [--out runs/ctpo_regime] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from algorithms import sign_test_p  # noqa: E402

from toolgym.training.outputs.logging import read_metrics  # noqa: E402

ABLATIONS = {  # name: (run folder, settings)
    "cumulative ratio, GRPO's fixed window": ("abl-fixed-window", ["loss.clip_mode=fixed", "loss.eps_low=0.2",
                                                                   "loss.eps_high=0.2", "loss.power=0", "loss.dual=3.0"]),
    "token ratio, CTPO's adaptive window": ("abl-token-ratio", ["loss.ratio=token"]),
}


def sweep(out: Path, warm: Path, algorithms: list[str], seeds: list[int], sets: list[str], config: str) -> None:
    cmd = [sys.executable, str(HERE / "algorithms.py"), "--config", config, "--algorithms", *algorithms,
           "--seeds", *map(str, seeds), "--out", str(out), "--warm-from", str(warm), "--reuse",
           "--title", "multi-part Arith (CTPO's regime)", "--set", *sets]
    subprocess.run(cmd, check=True)


def summary(run: Path) -> dict:
    metrics = read_metrics(run)
    evals = [m for m in metrics if m["kind"] == "eval"]
    train = [m for m in metrics if m["kind"] == "train"]
    later = [m["reward_mean"] for m in evals if m["step"] > 0]
    return {"before": evals[0]["reward_mean"], "after": evals[-1]["reward_mean"],
            "auc": statistics.mean(later) if later else float("nan"),
            "clip": statistics.mean(m.get("clip_frac", 0.0) for m in train) if train else float("nan"),
            "policy_tokens": statistics.mean(m.get("policy_tokens", float("nan")) for m in train) if train else float("nan")}


def fmt(vals: list[float]) -> str:
    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
    return f"{statistics.mean(vals):.3f} ± {sd:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="examples/arith_parts.yaml")
    ap.add_argument("--algorithms", nargs="+", default=["grpo", "ctpo", "gspo"])
    ap.add_argument("--lrs", nargs="+", default=["2.5e-4", "5e-4", "1e-3"])
    ap.add_argument("--tuning-seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--extra-seeds", type=int, nargs="*", default=[3, 4])
    ap.add_argument("--ablation-seeds", type=int, nargs="*", default=None, help="default: every seed")
    ap.add_argument("--out", default="runs/ctpo_regime")
    ap.add_argument("--set", dest="sets", nargs="*", default=[])
    a = ap.parse_args()
    out, warm = Path(a.out), Path(a.out) / "warm"
    seeds = a.tuning_seeds + a.extra_seeds
    for lr in a.lrs:
        sweep(out / f"lr{lr}", warm, a.algorithms, a.tuning_seeds, [*a.sets, f"optimizer.lr={lr}"], a.config)
    res = {(alg, lr, s): summary(out / f"lr{lr}" / f"{alg}-seed{s}") for alg in a.algorithms for lr in a.lrs
           for s in a.tuning_seeds}
    lines = [f"Grid on tuning seeds {a.tuning_seeds}: mean held-out reward over the evals after step 0 "
             "(final reward in brackets), mean ± sd", "",
             "| algorithm | " + " | ".join(f"lr {lr}" for lr in a.lrs) + " | best |", "|---|" + "---|" * (len(a.lrs) + 1)]
    best = {}
    for alg in a.algorithms:
        score = {lr: statistics.mean(res[(alg, lr, s)]["auc"] for s in a.tuning_seeds) for lr in a.lrs}
        best[alg] = max(a.lrs, key=lambda lr: score[lr])
        cells = [f"{fmt([res[(alg, lr, s)]['auc'] for s in a.tuning_seeds])} "
                 f"({statistics.mean(res[(alg, lr, s)]['after'] for s in a.tuning_seeds):.3f})" for lr in a.lrs]
        edge = " (grid edge)" if best[alg] in (a.lrs[0], a.lrs[-1]) else ""
        lines.append(f"| {alg} | " + " | ".join(cells) + f" | {best[alg]}{edge} |")
    for alg in a.algorithms:
        if a.extra_seeds:
            sweep(out / f"lr{best[alg]}", warm, [alg], a.extra_seeds, [*a.sets, f"optimizer.lr={best[alg]}"], a.config)
    ctpo_lr = best.get("ctpo", a.lrs[0])
    abl_seeds = seeds if a.ablation_seeds is None else a.ablation_seeds
    for tag, sets in ABLATIONS.values():
        sweep(out / tag, warm, ["ctpo"], abl_seeds, [*a.sets, f"optimizer.lr={ctpo_lr}", *sets], a.config)
    final = {alg: {s: summary(out / f"lr{best[alg]}" / f"{alg}-seed{s}") for s in seeds} for alg in a.algorithms}
    for name, (tag, _) in ABLATIONS.items():
        final[name] = {s: summary(out / tag / f"ctpo-seed{s}") for s in abl_seeds}
    base = "grpo" if "grpo" in final else a.algorithms[0]
    lines += ["", f"All {len(seeds)} seeds {seeds}, each at its best learning rate (ablations at CTPO's, {ctpo_lr}); "
              f"paired against {base} on the same seeds", "",
              "| variant | lr | reward before | reward after | mean eval after step 0 | minus " + base +
              " (after) | higher / tie / lower | sign p | minus " + base + " (mean eval) | clip frac | policy tokens |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, runs in final.items():
        lr = best.get(name, ctpo_lr)
        ss = sorted(runs)
        d_after = [runs[s]["after"] - final[base][s]["after"] for s in ss]
        d_auc = [runs[s]["auc"] - final[base][s]["auc"] for s in ss]
        w, loss = sum(d > 0 for d in d_after), sum(d < 0 for d in d_after)
        paired = ("", "", "", "") if name == base else (
            fmt(d_after), f"{w} / {len(ss) - w - loss} / {loss}", f"{sign_test_p(w, loss):.3f}", fmt(d_auc))
        lines.append(f"| {name} ({len(ss)} seeds) | {lr} | {fmt([runs[s]['before'] for s in ss])} | "
                     f"{fmt([runs[s]['after'] for s in ss])} | "
                     f"{fmt([runs[s]['auc'] for s in ss])} | " + " | ".join(paired) +
                     f" | {statistics.mean(runs[s]['clip'] for s in ss):.3f} | "
                     f"{statistics.mean(runs[s]['policy_tokens'] for s in ss):.0f} |")
    table = "\n".join(lines)
    print(table)
    (out / "table.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
