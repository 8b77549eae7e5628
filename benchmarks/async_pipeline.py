"""Steps per hour of the synchronous loop against the asynchronous pipeline, paired in one run on the same cores.

    .venv/bin/python benchmarks/async_pipeline.py [--steps 12] [--rounds 2] [--smollm2] [--json]

Variants (each a real ``toolgym train`` run in its own process, one after the other, the order reversed every
other round so drift on a shared machine falls on every variant alike):

- ``sync``: today's default, ``max_staleness: 0``, sampling in the trainer's process (the baseline);
- ``sync+workers``: ``max_staleness: 0`` with one rollout worker process (what leaving the process costs);
- ``K=1`` and ``K=2``: one worker sampling 1 or 2 steps ahead of the update;
- ``K=1 2w``: two workers sampling one step ahead (on 2 cores the update then shares theirs);
- ``vllm``, ``server`` and ``server K=1`` (``--server``, on the SmolLM2 config: vLLM's CPU attention has no
  kernel for the demo model's head size): the in-process vLLM engine against one ``vllm serve`` process
  (``rollout.sampler: vllm_server``), synchronous and one step ahead (pushes on the schedule); ``server K=1
  update`` pushes as soon as each update ends (``rollout.push_on: update``); the in-process engine runs in
  .venv-vllm's Python, which also runs the server. ``--server-variants`` picks some of them.

Workload: the Arith demo (``examples/arith_ctpo.yaml``: the tiny demo model, 8 prompts x 8 rollouts, up to 3
turns with the Python tool), warm-started once by SFT and shared by every run; with ``--smollm2`` also the
SmolLM2-135M multi-turn config (``examples/smollm2_arith.yaml``), fewer steps. Steps per hour come from the
runs' own metrics: steps 2..N over the time between the first step's record and the last (start-up, the
warm start and the final evaluation excluded). From the same records: how long each side idled per step, and the
mean reward (the learning signal must not get worse). The last line is ``async/sync steps per hour X.XXx (K=1)``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
TOOLGYM = str(Path(sys.executable).parent / "toolgym")
VARIANTS = {"sync": (0, 0), "sync+workers": (0, 1), "K=1": (1, 1), "K=2": (2, 1), "K=1 2w": (1, 2)}
#: in-process vLLM against a vLLM server (--server): (max_staleness, sampler, rollout.push_on)
SERVER_VARIANTS = {"vllm": (0, "vllm", None), "server": (0, "vllm_server", None),
                   "server K=1": (1, "vllm_server", None), "server K=1 update": (1, "vllm_server", "update")}
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"


def _load(name: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / "examples" / f"{name}.yaml").read_text())


def workload(name: str, steps: int, tmp: Path) -> dict[str, Any]:
    """The example config, without evaluations, checkpoints, plots or saved rollouts; the Arith demo starts from
    one shared warm-started model."""
    cfg = _load(name)
    cfg.update(steps=steps, checkpoint={"every": 0, "keep_last": 1})
    cfg["eval"] = {**cfg.get("eval", {}), "every": 0, "at_start": False, "tasks": 8}
    cfg["logging"] = {"tensorboard": False, "save_rollouts": False, "plot": False, "progress": False}
    if name == "arith_ctpo":
        warm = tmp / "warm"
        if not (warm / "config.json").exists():
            p = subprocess.run([TOOLGYM, "sft", str(ROOT / "examples" / f"{name}.yaml"), "--out", str(warm)],
                               capture_output=True, text=True, cwd=tmp)
            if p.returncode:
                raise SystemExit(f"the warm start failed: {p.stderr.strip().splitlines()[-1]}")
        cfg["model"] = {**cfg["model"], "name_or_path": str(warm)}
        cfg["model"].pop("model_kwargs", None)
        cfg["sft"] = {"enabled": False}
    return cfg


def run(cfg: dict[str, Any], variant: str, out: Path) -> dict[str, Any]:
    cfg = json.loads(json.dumps(cfg))
    command, env = [TOOLGYM], dict(os.environ)
    if variant in SERVER_VARIANTS:
        staleness, sampler, push_on = SERVER_VARIANTS[variant]
        cfg["rollout"].update(max_staleness=staleness, workers=0, sampler=sampler)
        if push_on:
            cfg["rollout"]["push_on"] = push_on
        if sampler == "vllm":  # the engine lives in the vLLM environment: so does this run
            command = [str(VLLM_PYTHON), "-m", "toolgym"]
        env["TOOLGYM_VLLM_PYTHON"] = str(VLLM_PYTHON)
    else:
        staleness, workers = VARIANTS[variant]
        cfg["rollout"].update(max_staleness=staleness, workers=workers)
    cfg["output_dir"] = str(out)
    path = out.with_suffix(".yaml")
    path.write_text(yaml.safe_dump(cfg))
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    p = subprocess.run([*command, "train", str(path), "--no-progress"], capture_output=True, text=True,
                       cwd=out.parent, env=env)
    wall = time.perf_counter() - t0
    if p.returncode:
        raise SystemExit(f"{variant} failed: {p.stderr.strip()[-2000:]}")
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in recs if r.get("kind") == "train"]
    span = train[-1]["time"] - train[0]["time"]
    later = train[1:]
    return {"variant": variant, "steps_per_hour": 3600 * (len(train) - 1) / span, "wall_s": wall,
            "step_s": span / (len(train) - 1),
            "trainer_idle_s": statistics.mean(r.get("trainer_idle_s", r.get("rollout_s", 0.0)) for r in later),
            "update_s": statistics.mean(r["update_s"] for r in later),
            "rollout_s": statistics.mean(r["rollout_s"] for r in later),
            "sampler_idle_s": statistics.mean(r.get("sampler_idle_s", 0.0) for r in later),
            "reward_mean": statistics.mean(r["reward_mean"] for r in train),
            "staleness_mean": statistics.mean(r.get("staleness_mean", 0.0) for r in train),
            "load_before": load, "load_after": os.getloadavg()[0]}


def bench(name: str, steps: int, rounds: int, tmp: Path, variants: list[str]) -> dict[str, list[dict[str, Any]]]:
    cfg = workload(name, steps, tmp)
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for r in range(rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for v in order:
            res = run(cfg, v, tmp / f"{name}-{v.replace('=', '').replace(' ', '')}-{r}")
            results[v].append(res)
            print(f"{name:12s} round {r} {v:17s} {res['steps_per_hour']:8.1f} steps/h  step {res['step_s']:6.2f}s "
                  f"(rollout wait {res['rollout_s']:.2f}s, update {res['update_s']:.2f}s, sampler idle "
                  f"{res['sampler_idle_s']:.2f}s/step)  reward {res['reward_mean']:.3f}  "
                  f"load {res['load_before']:.1f}->{res['load_after']:.1f}", flush=True)
    return results


def summary(name: str, results: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    med = {v: statistics.median(x["steps_per_hour"] for x in rs) for v, rs in results.items()}
    print(f"{name}: median steps per hour " + ", ".join(f"{v} {m:.1f}" for v, m in med.items()))
    if "sync" not in results:  # --server alone: against the in-process engine (else the first variant)
        base = "vllm" if "vllm" in med else next(iter(med))
        ratios = {v: med[v] / med[base] for v in med}
        print(f"{name}: ratio to {base} " + ", ".join(f"{v} {r:.2f}x" for v, r in ratios.items()))
        return ratios
    sync = results["sync"]
    idle = statistics.mean(x["rollout_s"] / x["step_s"] for x in sync)
    upd = statistics.mean(x["update_s"] / x["step_s"] for x in sync)
    print(f"{name}: in the synchronous loop the update idles while sampling {idle:.0%} of a step and sampling "
          f"idles while updating {upd:.0%}")
    ratios = {v: med[v] / med["sync"] for v in med}
    print(f"{name}: ratio to sync " + ", ".join(f"{v} {r:.2f}x" for v, r in ratios.items()))
    return ratios


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--smollm2", action="store_true", help="also the SmolLM2-135M multi-turn config")
    ap.add_argument("--smollm2-steps", type=int, default=4)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    ap.add_argument("--no-arith", action="store_true", help="only the SmolLM2 config (with --smollm2)")
    ap.add_argument("--server", action="store_true",
                    help="only in-process vLLM against a vLLM server (the SmolLM2 config, --smollm2-steps): "
                    + ", ".join(SERVER_VARIANTS))
    ap.add_argument("--server-variants", nargs="+", default=list(SERVER_VARIANTS), choices=list(SERVER_VARIANTS))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if "sync" not in a.variants:
        a.variants.insert(0, "sync")  # the baseline of every ratio
    tmp = Path(tempfile.mkdtemp(prefix="toolgym-async-"))
    out: dict[str, Any] = {}
    if a.server:  # the SmolLM2 config: vLLM's CPU attention has no kernel for the demo model's head size (16)
        runs = bench("smollm2_arith", a.smollm2_steps, a.rounds, tmp, a.server_variants)
        ratios = summary("smollm2_arith", runs)
        if a.json:
            print(json.dumps({"smollm2_arith": {"runs": runs, "ratios": ratios}}, indent=2))
        if {"vllm", "server", "server K=1"} <= set(ratios):
            print(f"server/in-process vLLM steps per hour {ratios['server']:.2f}x (K=0), "
                  f"{ratios['server K=1']:.2f}x (K=1)")
        return
    if not a.no_arith:
        arith = bench("arith_ctpo", a.steps, a.rounds, tmp, a.variants)
        out["arith_ctpo"] = {"runs": arith, "ratios": summary("arith_ctpo", arith)}
    if a.smollm2:
        smol = bench("smollm2_arith", a.smollm2_steps, a.rounds, tmp, a.variants)
        out["smollm2_arith"] = {"runs": smol, "ratios": summary("smollm2_arith", smol)}
    if a.json:
        print(json.dumps(out, indent=2))
    last = out["arith_ctpo" if "arith_ctpo" in out else "smollm2_arith"]["ratios"]
    if "K=1" in last:
        print(f"async/sync steps per hour {last['K=1']:.2f}x (K=1)")


if __name__ == "__main__":
    main()
