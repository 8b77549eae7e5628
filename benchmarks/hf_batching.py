"""Continuous vs static batching in the ``hf`` sampler: rollout throughput on multi-turn Arith, paired in one run.
With ``--vs-generate``: the sampler's tokens/s beside ``model.generate`` on the same prompts and rows instead.

    .venv/bin/python benchmarks/hf_batching.py [--model smollm2-135m-instruct] [--tasks 4] [--group 2]
        [--parts 2] [--max-tokens 64] [--rounds 3] [--threads 1] [--json]
    .venv/bin/python benchmarks/hf_batching.py --vs-generate [--tasks 4] [--group 2] [--max-tokens 32]
        [--turns 3] [--rounds 2]

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


def vs_generate(args: argparse.Namespace, sampler: Any) -> dict:
    """Tokens/s of ``model.generate`` and of the sampler (prefix reuse off, then on) on the same rows: ``--tasks``
    chat prompts x ``--group`` rows each, ``--max-tokens`` per turn for every row (end-of-turn ignored on both
    sides, so all do the same work), over ``--turns`` turns: each next prompt is the whole conversation so far
    plus a fixed user message. One turn is the work ``generate`` is built for; on later turns ``generate``
    prefills the conversation again, the sampler with prefix reuse only its new tokens. Sampling at
    temperature 1 with no top-k/top-p on both sides."""
    import torch

    from toolgym.agents.hf_sampler import HFSampler
    from toolgym.agents.sampling import SamplingParams

    tok, model = sampler.tokenizer, sampler.model
    firsts = [tok.apply_chat_template([{"role": "user", "content": f"What is {3 * i + 4} + {7 * i + 5}? Explain."}],
                                      add_generation_prompt=True, tokenize=True, return_dict=False)
              for i in range(args.tasks)]
    follow = tok("<|im_end|>\n<|im_start|>user\nAnd now add 1 to it.<|im_end|>\n<|im_start|>assistant\n",
                 add_special_tokens=False)["input_ids"]
    pad = sampler.pad_id
    T = args.max_tokens

    def by_generate(convs: list[list[int]]) -> list[list[int]]:
        L = max(len(c) for c in convs)
        ids = torch.tensor([[pad] * (L - len(c)) + c for c in convs])
        mask = torch.tensor([[0] * (L - len(c)) + [1] * len(c) for c in convs])
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                                 top_p=1.0, max_new_tokens=T, min_new_tokens=T, pad_token_id=pad)
        return out[:, L:].tolist()

    def by_sampler(s: HFSampler, convs: list[list[int]], turn: int) -> list[list[int]]:
        async def all_rows() -> list:
            return await asyncio.gather(*(s.agenerate([c], SamplingParams(max_tokens=T, seed=1000 * turn + i))
                                          for i, c in enumerate(convs)))
        return [r[0][0].token_ids for r in asyncio.run(all_rows())]

    sides: dict[str, Any] = {"generate": None}
    for name, mb in (("sampler, no reuse", 0), ("sampler, prefix reuse", 512)):
        s = HFSampler(model, tok, prefix_cache_mb=mb, max_batch_size=len(firsts) * args.group)
        s.eos_token_ids = set()
        sides[name] = s
    res: dict[str, dict[str, list[float]]] = {k: {"one_turn": [], "multi_turn": []} for k in sides}
    for name in sides:  # warm-up: first-call costs off the clock
        _ = by_generate(firsts[:1]) if name == "generate" else by_sampler(sides[name], firsts[:1], 0)
    for r in range(args.rounds):
        names = list(sides) if r % 2 == 0 else list(reversed(sides))
        for name in names:
            torch.manual_seed(r)
            if name != "generate" and sides[name].prefix_store is not None:
                sides[name].prefix_store.clear()  # each run starts cold: no caches of earlier runs
            convs = [list(p) for p in firsts for _ in range(args.group)]
            walls = []
            for turn in range(args.turns):
                t0 = time.perf_counter()
                new = by_generate(convs) if name == "generate" else by_sampler(sides[name], convs, turn)
                walls.append(time.perf_counter() - t0)
                assert all(len(x) == T for x in new), "every row must sample max_tokens"
                convs = [c + x + follow for c, x in zip(convs, new, strict=True)]
            rows = len(convs)
            res[name]["one_turn"].append(rows * T / walls[0])
            res[name]["multi_turn"].append(rows * T * args.turns / sum(walls))
            if not args.json:
                print(f"round {r + 1} {name:<22} one turn {rows * T / walls[0]:7.1f} tokens/s; {args.turns} turns "
                      f"{rows * T * args.turns / sum(walls):7.1f} tokens/s ({' '.join(f'{w:.1f}' for w in walls)} s)",
                      flush=True)
    return {k: {m: statistics.median(v) for m, v in d.items()} for k, d in res.items()}


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
    ap.add_argument("--vs-generate", action="store_true", help="the sampler's tokens/s beside model.generate")
    ap.add_argument("--turns", type=int, default=3, help="with --vs-generate: turns per conversation")
    args = ap.parse_args()

    import torch

    from toolgym.agents.chat import ChatTemplate
    from toolgym.agents.hf_sampler import HFSampler
    from toolgym.assets import asset_path

    if args.threads:
        torch.set_num_threads(args.threads)
    after = HFSampler(str(asset_path(args.model)), batching="continuous")
    if args.vs_generate:
        med = vs_generate(args, after)
        if args.json:
            print(json.dumps({"config": vars(args), "torch_threads": torch.get_num_threads(), "median": med}, indent=2))
            return 0
        print(f"{args.tasks} prompts x {args.group} rows, {args.max_tokens} tokens per row and turn, {args.turns} "
              f"turns, {args.model}, {torch.get_num_threads()} torch threads, medians of {args.rounds} rounds")
        print(f"{'side':<22} {'one turn tokens/s':>18} {'multi-turn tokens/s':>20}")
        for k, m in med.items():
            print(f"{k:<22} {m['one_turn']:18.1f} {m['multi_turn']:20.1f}")
        g = med["generate"]
        for k in list(med)[1:]:
            print(f"{k} / generate: one turn x{med[k]['one_turn'] / g['one_turn']:.2f}, "
                  f"multi-turn x{med[k]['multi_turn'] / g['multi_turn']:.2f}")
        return 0
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
