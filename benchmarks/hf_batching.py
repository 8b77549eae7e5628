"""Continuous vs static batching in the ``hf`` sampler: rollout throughput on multi-turn Arith, paired in one run.

    .venv/bin/python benchmarks/hf_batching.py [--model smollm2-135m-instruct] [--tasks 4] [--group 2]
        [--parts 2] [--max-tokens 64] [--rounds 3] [--threads 1] [--json]

Workload: ``--tasks`` x ``--group`` episodes of ``toolgym/Arith-v0`` with its sandboxed Python tool and
``--parts`` questions per episode (each question is a user turn, so every episode is multi-turn whatever the
model does with the tool), SmolLM2-135M-Instruct at temperature 1. Every turn is a new sampler request.

The "before" is the static scheduler kept selectable in the same code (``HFSampler(batching="static")``: a
batch runs until its longest row ends, requests that arrive meanwhile wait for it); the "after" is the
continuous one (rows join at the next decode step and leave when they end). Both samplers wrap the same
loaded model. Each round runs the same episodes (same tasks, same sampling seeds) once per scheduler, the
order alternating between rounds, after one small warm-up run each. Prints each run with where its model
time went (decode steps and rows per step, prefill passes and tokens), the medians of episodes/s and sampled
tokens/s, and the ratio continuous/static (median of the per-round ratios); the ratio of process CPU
seconds too, which the machine's load moves less than wall time (sandboxed tool runs are other processes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from typing import Any


def run(args: argparse.Namespace, sampler: Any, tpl: Any, tasks: int, group: int, max_tokens: int) -> dict:
    import toolgym
    from toolgym.agents.runner import EpisodeLimits, RolloutRunner, TaskSpec
    from toolgym.agents.sampling import SamplingParams

    env_kw = {"parts": args.parts, "max_turns": 2 * args.parts}
    runner = RolloutRunner(sampler, tpl, lambda: toolgym.make("toolgym/Arith-v0", **env_kw),
                           SamplingParams(max_tokens=max_tokens, temperature=1.0),
                           EpisodeLimits(max_turns=2 * args.parts, max_total_tokens=2048, max_wall_s=3600), seed=0)
    runner.env_id = "toolgym/Arith-v0"
    specs = [TaskSpec(seed=i, options={"index": i}) for i in range(tasks)]
    fwd = {"decode_steps": 0, "decode_rows": 0, "prefills": 0, "prefill_tokens": 0}

    def count(module: Any, args: Any, kwargs: dict) -> None:  # where the model time goes
        ids = kwargs["input_ids"]
        if ids.shape[1] == 1:
            fwd["decode_steps"] += 1
            fwd["decode_rows"] += ids.shape[0]
        else:
            fwd["prefills"] += 1
            fwd["prefill_tokens"] += ids.numel()  # padding included: it is computed

    hook = sampler.model.register_forward_pre_hook(count, with_kwargs=True)
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        groups = asyncio.run(runner.arun(specs, group))
    finally:
        hook.remove()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    trajs = [t for g in groups for t in g]
    toks = sum(t.num_model_tokens for t in trajs)
    turns = sum(sum(1 for m in t.turns if m["role"] == "assistant") for t in trajs)
    return {"episodes": len(trajs), "wall_s": wall, "cpu_s": cpu, "episodes_per_s": len(trajs) / wall, "tokens": toks,
            "tokens_per_s": toks / wall, "turns": turns, "errors": sum(1 for t in trajs if t.error),
            "reward": statistics.fmean(t.reward for t in trajs), **fwd}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--group", type=int, default=2)
    ap.add_argument("--parts", type=int, default=2, help="questions (user turns) per episode")
    ap.add_argument("--max-tokens", type=int, default=64, help="per turn")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import torch

    from toolgym.agents.chat import ChatTemplate
    from toolgym.agents.hf_sampler import HFSampler
    from toolgym.assets import asset_path

    if args.threads:
        torch.set_num_threads(args.threads)
    after = HFSampler(str(asset_path(args.model)), batching="continuous")
    before = HFSampler(after.model, after.tokenizer, batching="static")  # the same weights, loaded once
    tpl = ChatTemplate(after.tokenizer)
    sides = {"static": before, "continuous": after}
    for s in sides.values():  # warm-up: first-call costs (allocator, sandbox image) off the clock
        run(args, s, tpl, 1, 1, 4)
    loads = [os.getloadavg()[0]]
    runs: dict[str, list[dict]] = {"static": [], "continuous": []}
    for r in range(args.rounds):
        order = ["static", "continuous"] if r % 2 == 0 else ["continuous", "static"]
        for name in order:
            res = run(args, sides[name], tpl, args.tasks, args.group, args.max_tokens)
            runs[name].append(res)
            loads.append(os.getloadavg()[0])
            if not args.json:
                rows = res["decode_rows"] / max(res["decode_steps"], 1)
                print(f"round {r + 1} {name:<10} {res['wall_s']:6.1f} s ({res['cpu_s']:5.1f} s CPU)  "
                      f"{res['episodes_per_s']:.4f} episodes/s  "
                      f"{res['tokens_per_s']:5.2f} tokens/s  ({res['tokens']} tokens in {res['turns']} turns; "
                      f"{res['decode_steps']} decode steps of {rows:.2f} rows; {res['prefills']} prefills of "
                      f"{res['prefill_tokens']} tokens with padding; errors {res['errors']})", flush=True)
    med = {k: {m: statistics.median(x[m] for x in v) for m in ("episodes_per_s", "tokens_per_s", "wall_s", "cpu_s")}
           for k, v in runs.items()}
    ratio_eps = statistics.median(c["episodes_per_s"] / s["episodes_per_s"]
                                  for s, c in zip(runs["static"], runs["continuous"], strict=True))
    ratio_tps = statistics.median(c["tokens_per_s"] / s["tokens_per_s"]
                                  for s, c in zip(runs["static"], runs["continuous"], strict=True))
    ratio_cpu = statistics.median(s["cpu_s"] / c["cpu_s"]
                                  for s, c in zip(runs["static"], runs["continuous"], strict=True))
    result = {"config": vars(args), "torch_threads": torch.get_num_threads(), "load_avg_1m": loads, "runs": runs,
              "median": med, "ratio_episodes_per_s": ratio_eps, "ratio_tokens_per_s": ratio_tps,
              "ratio_cpu_s_static_over_continuous": ratio_cpu}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"toolgym/Arith-v0, {args.tasks} tasks x {args.group} episodes, {args.parts} questions per episode, "
          f"max {args.max_tokens} tokens/turn, {args.model}, {torch.get_num_threads()} torch threads, "
          f"load average {min(loads):.1f}-{max(loads):.1f}")
    print(f"{'side':<11} {'median s':>9} {'CPU s':>7} {'episodes/s':>11} {'tokens/s':>9}")
    for k in ("static", "continuous"):
        m = med[k]
        print(f"{k:<11} {m['wall_s']:9.1f} {m['cpu_s']:7.1f} {m['episodes_per_s']:11.4f} {m['tokens_per_s']:9.2f}")
    print(f"continuous/static (median of {args.rounds} paired rounds): episodes/s x{ratio_eps:.2f}, "
          f"sampled tokens/s x{ratio_tps:.2f}; process CPU seconds static/continuous x{ratio_cpu:.2f} (less "
          f"sensitive to the machine's load than wall time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
