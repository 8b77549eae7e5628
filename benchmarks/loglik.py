"""Log-likelihood multiple-choice scoring speed: toolgym's packed scorer vs a minimal loop.

Both score ARC-Challenge (test split, 1,172 questions) with SmolLM2-135M-Instruct on CPU, side by side
in the same process. The baseline is the plain transformers loop that runs one forward per
(question, choice). The script checks that both produce the same log-likelihoods (max abs diff)
and the same predictions, and prints questions/s and the speed-up.

    .venv/bin/python benchmarks/loglik.py [--sample N] [--seed S] [--full] [--threads T] [--batch B]

The two methods are timed interleaved, block by block (B questions: the baseline on the block, then
the packed scorer on the same block), so a machine whose load changes during the run slows both
alike; the ratio is of the summed times. --sample N measures a seeded random subset of N questions
(default: all 1,172; the baseline is the slow part). --full also times the packed scorer alone on
all 1,172 questions (one call, sorted by length as the suite runner does) and prints its acc/acc_norm.
Needs `toolgym assets fetch smollm2-135m-instruct` and `toolgym assets fetch arc_challenge`.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", type=int, default=None, help="seeded random subset size (default: all 1,172)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--full", action="store_true", help="also time the packed scorer on all questions")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8, help="questions per packed forward (and per timed block)")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)

    import torch

    from toolgym.suites.loglik import LoglikScorer, score_naive
    from toolgym.suites.loglik_mode import load_mc_items
    from toolgym.suites.models import load_causal_lm

    torch.set_num_threads(args.threads)
    model, tok = load_causal_lm(args.model)
    all_items = load_mc_items("arc_challenge")
    total = len(all_items)
    items = all_items
    if args.sample and args.sample < total:
        items = random.Random(args.seed).sample(all_items, args.sample)
    print(f"ARC-Challenge: comparing on {len(items)} of {total} questions "
          f"({sum(len(i.choices) for i in items)} choices; "
          f"{'seeded random subset, seed=' + str(args.seed) if len(items) < total else 'all'}), "
          f"model={args.model}, threads={args.threads}, batch={args.batch}")

    scorer = LoglikScorer(model, tok, batch_questions=args.batch)
    # Warm up both paths once (allocator, kernels) outside the timings.
    score_naive(model, tok, items[:1])
    scorer.score(items[:1])

    ref, got = [], []
    t_naive = t_packed = 0.0
    for start in range(0, len(items), args.batch):
        block = items[start : start + args.batch]
        t0 = time.perf_counter()
        ref.extend(score_naive(model, tok, block))
        t1 = time.perf_counter()
        got.extend(scorer.score(block))
        t2 = time.perf_counter()
        t_naive += t1 - t0
        t_packed += t2 - t1
        done = start + len(block)
        if done % (args.batch * 5) == 0 or done == len(items):
            worst = max(abs(a - b) for g, r in zip(got, ref, strict=True) for a, b in zip(g.logliks, r.logliks,
                                                                                          strict=True))
            agree = sum((g.pred, g.pred_norm) == (r.pred, r.pred_norm) for g, r in zip(got, ref, strict=True))
            print(f"  {done}/{len(items)}: baseline {t_naive:.0f} s, packed {t_packed:.0f} s, "
                  f"ratio so far {t_naive / t_packed:.2f}x; max |diff| {worst:.2e}, "
                  f"same argmax (acc and acc_norm) on {agree}/{done}")

    diffs = [abs(a - b) for g, r in zip(got, ref, strict=True) for a, b in zip(g.logliks, r.logliks, strict=True)]
    max_diff = max(diffs)
    same_pred = sum(g.pred == r.pred for g, r in zip(got, ref, strict=True))
    same_norm = sum(g.pred_norm == r.pred_norm for g, r in zip(got, ref, strict=True))
    n = len(items)
    print(f"baseline (one choice per forward): {n / t_naive:8.3f} questions/s  ({t_naive:.1f} s)")
    print(f"toolgym packed (batch={args.batch}):      {n / t_packed:8.3f} questions/s  ({t_packed:.1f} s)")
    print(f"speed-up: {t_naive / t_packed:.2f}x (interleaved blocks of {args.batch}, summed times)")
    print(f"log-likelihoods ({len(diffs)} choices): max |diff| = {max_diff:.2e}, median = "
          f"{statistics.median(diffs):.2e}; same argmax (acc) on {same_pred}/{n}, "
          f"same argmax (acc_norm) on {same_norm}/{n} questions")
    print(f"on these {n}: acc = {sum(g.acc for g in got) / n:.4f} (baseline {sum(r.acc for r in ref) / n:.4f}), "
          f"acc_norm = {sum(g.acc_norm for g in got) / n:.4f} (baseline {sum(r.acc_norm for r in ref) / n:.4f})")

    if args.full:
        t0 = time.perf_counter()
        full = scorer.score(all_items)
        t_full = time.perf_counter() - t0
        by_id = {s.id: s for s in full}
        full_diff = max(abs(a - b) for g in got for a, b in zip(by_id[g.id].logliks, g.logliks, strict=True))
        print(f"toolgym packed, all {total} questions in one call: {total / t_full:8.3f} questions/s "
              f"({t_full:.1f} s); acc = {sum(s.acc for s in full) / total:.4f}, "
              f"acc_norm = {sum(s.acc_norm for s in full) / total:.4f}; "
              f"max |diff| vs the blocks above = {full_diff:.2e}")
    assert max_diff < 1e-3, f"scores differ: max |diff| {max_diff}"


if __name__ == "__main__":
    main()
