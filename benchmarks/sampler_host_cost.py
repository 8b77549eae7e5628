"""The ``hf`` sampler's per-decode-step sampling cost, before and after sampling moved into one batched draw.

    .venv/bin/python benchmarks/sampler_host_cost.py [--rows 32] [--vocab 151936] [--steps 30] [--threads 0]
        [--top-p 1.0] [--temperature 1.0] [--json]

Each step takes fresh random logits of ``[rows, vocab]`` (Qwen's vocabulary by default) and draws one token per
row, seeded per row, as the sampler does after every forward. Two paths, measured side by side in one run, the
order alternating step by step:

- ``old`` (the baseline, reimplemented here as it was before): the logits copied to the host as float32, the
  processing (temperature, top-p, log-softmax) on the host, then one ``torch.multinomial`` per row from the row's
  generator, one row after another, each token and log-prob read back separately;
- ``new`` (``toolgym.agents._hf_rows.draw``): the processing and an inverse-CDF draw (one uniform per row from its
  generator, ``cumsum`` + ``searchsorted``) for all rows at once where the logits live; only ``[rows]`` ids and
  log-probs are copied back.

On this CPU both paths compute on the host, so the figure is their whole cost; on a GPU the new path leaves the
host only the kernel launches and one small copy, the old one all of its work plus a ``[rows, vocab]`` copy.
Prints the median milliseconds per step of each path and the ratio old/new.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from toolgym.agents._hf_rows import Row, draw, processed_logprobs
from toolgym.agents.sampling import SamplingParams


def old_draw(logits: torch.Tensor, rows: list[Row]) -> None:
    """The baseline: the sampler's draw before this change (host copy, host processing, a multinomial per row)."""
    host = logits.float().cpu()
    logp = processed_logprobs(host, [r.params for r in rows])
    for i, row in enumerate(rows):
        tok = int(torch.multinomial(logp[i].exp(), 1, generator=row.gen))
        row.push(tok, float(logp[i, tok]))


def fresh_rows(n: int, params: SamplingParams) -> list[Row]:
    return [Row([0], params, i, 1 << 30, frozenset(), frozenset()) for i in range(n)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=151_936, help="Qwen2.5's vocabulary by default")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    params = SamplingParams(temperature=args.temperature, top_p=args.top_p, seed=0)
    paths = {"old": old_draw, "new": draw}
    rows = {name: fresh_rows(args.rows, params) for name in paths}
    gen = torch.Generator().manual_seed(0)
    times: dict[str, list[float]] = {name: [] for name in paths}
    for step in range(args.steps + 2):  # the first two steps warm up (allocator, kernels) off the record
        logits = torch.randn(args.rows, args.vocab, generator=gen) * 3
        order = ["old", "new"] if step % 2 == 0 else ["new", "old"]
        for name in order:
            t0 = time.perf_counter()
            paths[name](logits, rows[name])
            if step >= 2:
                times[name].append(time.perf_counter() - t0)
    med = {name: 1000 * statistics.median(t) for name, t in times.items()}
    result = {"config": vars(args), "torch_threads": torch.get_num_threads(), "ms_per_step": med,
              "ratio_old_over_new": med["old"] / med["new"]}
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{args.rows} rows x {args.vocab} vocabulary, temperature {args.temperature}, top-p {args.top_p}, "
          f"{args.steps} steps, {torch.get_num_threads()} torch threads (CPU)")
    print(f"old (host copy + host processing + multinomial per row): {med['old']:8.1f} ms per decode step")
    print(f"new (one batched processing + inverse-CDF draw):          {med['new']:8.1f} ms per decode step")
    print(f"old/new: x{result['ratio_old_over_new']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
