"""Rollout benchmark: throughput of RolloutRunner + HFSampler, where the wall time goes, and what the
asyncio runner buys over a serial one when tools take time.

    .venv/bin/python benchmarks/rollouts.py [--env toolgym/Arith-v0] [--model smollm2-135m-instruct]
                                            [--tasks 2] [--group 4] [--max-tokens 48] [--tool-latency 0.5] [--json]

Part 1 (workload): N tasks x G episodes of a real environment (Arith or MathTIR, tools in the sandbox)
with SmolLM2 on HFSampler. Prints episodes/s, model tokens/s, and the share of wall time with no
generation in flight (target < 10%: the runner keeps the sampler busy).

Part 2 (serial vs async): the same episode mix, tools made slow by a fixed extra latency per step
(as a remote sandbox or a slow test would be), run one episode after another and then concurrently,
side by side in this run. Prints both wall times and the speedup.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any


class SlowTools:
    """Wraps an env: every step first waits `latency_s` without blocking the event loop."""

    def __init__(self, env: Any, latency_s: float) -> None:
        self.env, self.latency_s = env, latency_s

    async def areset(self, *, seed=None, options=None):
        return await self.env.areset(seed=seed, options=options)

    async def astep(self, text: str):
        await asyncio.sleep(self.latency_s)
        return await self.env.astep(text)

    async def aclose(self) -> None:
        await self.env.aclose()


def run_workload(args: argparse.Namespace, sampler: Any, tpl: Any, latency: float, serial: bool) -> dict:
    import toolgym
    from toolgym.agents.runner import EpisodeLimits, RolloutRunner, TaskSpec
    from toolgym.agents.sampling import SamplingParams

    def factory() -> Any:
        env = toolgym.make(args.env)
        return SlowTools(env, latency) if latency else env

    runner = RolloutRunner(sampler, tpl, factory, SamplingParams(max_tokens=args.max_tokens, temperature=1.0),
                           EpisodeLimits(max_turns=args.max_turns, max_total_tokens=2048, max_wall_s=600), seed=0)
    runner.env_id = args.env
    specs = [TaskSpec(seed=i, options={"index": i}) for i in range(args.tasks)]
    t0 = time.perf_counter()
    groups = asyncio.run(runner.arun(specs, args.group, serial=serial))
    wall = time.perf_counter() - t0
    trajs = [t for g in groups for t in g]
    toks = sum(t.num_model_tokens for t in trajs)
    return {"episodes": len(trajs), "wall_s": wall, "episodes_per_s": len(trajs) / wall, "model_tokens": toks,
            "tokens_per_s": toks / wall, "outside_generation_share": runner.stats.outside_generation_share,
            "errors": sum(1 for t in trajs if t.error), "mean_reward": sum(t.reward for t in trajs) / len(trajs),
            "finish": sorted({t.finish_reason for t in trajs})}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="toolgym/Arith-v0")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--max-turns", type=int, default=2)
    ap.add_argument("--tool-latency", type=float, default=0.5, help="extra seconds per tool step in part 2")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import torch

    from toolgym.agents.chat import ChatTemplate
    from toolgym.agents.hf_sampler import HFSampler
    from toolgym.assets import asset_path

    if args.threads:
        torch.set_num_threads(args.threads)
    sampler = HFSampler(str(asset_path(args.model)))
    tpl = ChatTemplate(sampler.tokenizer)
    run_workload(argparse.Namespace(**{**vars(args), "tasks": 1, "group": 1, "max_tokens": 4}), sampler, tpl, 0, False)

    load = run_workload(args, sampler, tpl, 0.0, serial=False)
    serial = run_workload(args, sampler, tpl, args.tool_latency, serial=True)
    conc = run_workload(args, sampler, tpl, args.tool_latency, serial=False)
    result = {"workload": load, "serial": serial, "async": conc, "speedup": serial["wall_s"] / conc["wall_s"],
              "config": vars(args), "torch_threads": torch.get_num_threads()}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"workload {args.env}: {args.tasks} tasks x {args.group} episodes, {args.model} on HFSampler "
              f"(max {args.max_tokens} tokens/turn, {args.max_turns} turns, {torch.get_num_threads()} torch threads)")
        print(f"  {load['episodes_per_s']:.3f} episodes/s, {load['tokens_per_s']:.1f} model tokens/s, "
              f"{load['model_tokens']} tokens in {load['wall_s']:.1f} s, errors {load['errors']}, "
              f"mean reward {load['mean_reward']:.3f}")
        share = load["outside_generation_share"]
        print(f"  wall time with no generation in flight: {share:.1%} (target < 10%: {'met' if share < 0.10 else 'NOT met'})")
        print(f"serial vs async with {args.tool_latency:g} s of tool latency per step:")
        print(f"  serial {serial['wall_s']:.1f} s, async {conc['wall_s']:.1f} s, speedup x{result['speedup']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
