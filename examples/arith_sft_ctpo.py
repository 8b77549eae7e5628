"""The CPU demonstration over several seeds: SFT warm start + CTPO on Arith-v0, before/after per seed.

    .venv/bin/python examples/arith_sft_ctpo.py [--seeds 0 1 2] [--config examples/arith_ctpo.yaml] [--set key=value ...]

Each seed is one `toolgym train` run (its own demonstrations, tokenizer, model init and rollout seeds);
the table at the end has the held-out reward and tool-use rate before and after RL for each.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

TOOLGYM = str(Path(sys.executable).parent / "toolgym")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default=str(Path(__file__).with_name("arith_ctpo.yaml")))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default="runs/arith_ctpo_seeds")
    ap.add_argument("--set", dest="sets", nargs="*", default=[])
    a = ap.parse_args()
    rows = []
    for seed in a.seeds:
        args = [TOOLGYM, "train", a.config, "--json", "--seed", str(seed), "-o", f"{a.out}/seed{seed}"]
        for s in a.sets:
            args += ["-s", s]
        p = subprocess.run(args, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(p.stderr[-2000:])
        s = json.loads(p.stdout.strip().splitlines()[-1])
        rows.append((seed, s))
        print(f"seed {seed}: reward {s['before']['reward_mean']:.3f} -> {s['after']['reward_mean']:.3f}, "
              f"tool use {s['before']['tool_rate']:.2f} -> {s['after']['tool_rate']:.2f}", flush=True)
    print("| seed | reward before | reward after | tool use before | tool use after |")
    print("|---|---|---|---|---|")
    for seed, s in rows:
        print(f"| {seed} | {s['before']['reward_mean']:.3f} | {s['after']['reward_mean']:.3f} | "
              f"{s['before']['tool_rate']:.2f} | {s['after']['tool_rate']:.2f} |")
    b = [s["before"]["reward_mean"] for _, s in rows]
    f = [s["after"]["reward_mean"] for _, s in rows]
    print(f"| mean | {statistics.mean(b):.3f} | {statistics.mean(f):.3f} | | |")
    print("plots:", ", ".join(s.get("plot", "") for _, s in rows))


if __name__ == "__main__":
    main()
