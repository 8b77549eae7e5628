"""Log-likelihood multiple-choice scoring speed: toolgym's packed scorer vs a minimal loop.

Both score ARC-Challenge (test split, 1,172 questions) with SmolLM2-135M-Instruct on CPU, side by side
in the same process. The baseline is the plain transformers loop that runs one forward per
(question, choice). The script checks that both produce the same log-likelihoods (max abs diff)
and the same acc/acc_norm, and prints questions/s and the speed-up.

    .venv/bin/python benchmarks/loglik.py [--limit N] [--threads T] [--batch B]

--limit N measures the first N questions (both methods on the same ones); the subset size is
printed. Needs `toolgym assets fetch smollm2-135m-instruct` and `toolgym assets fetch arc_challenge`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=None, help="questions to measure (default: all 1,172)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8, help="questions per packed forward")
    ap.add_argument("--model", default="smollm2-135m-instruct")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)

    import torch

    from toolgym.suites.loglik import LoglikScorer, score_naive
    from toolgym.suites.models import load_causal_lm
    from toolgym.suites.science import load_mc_items

    torch.set_num_threads(args.threads)
    model, tok = load_causal_lm(args.model)
    items = load_mc_items("arc_challenge")
    total = len(items)
    if args.limit:
        items = items[: args.limit]
    print(f"ARC-Challenge: measuring {len(items)} of {total} questions "
          f"({sum(len(i.choices) for i in items)} choices), model={args.model}, threads={args.threads}")

    # Warm up both paths once (allocator, kernels) on one question outside the timings.
    score_naive(model, tok, items[:1])
    LoglikScorer(model, tok, batch_questions=args.batch).score(items[:1])

    t0 = time.perf_counter()
    ref = score_naive(model, tok, items)
    t_naive = time.perf_counter() - t0

    t0 = time.perf_counter()
    got = LoglikScorer(model, tok, batch_questions=args.batch).score(items)
    t_packed = time.perf_counter() - t0

    diffs = [abs(a - b) for g, r in zip(got, ref, strict=True) for a, b in zip(g.logliks, r.logliks, strict=True)]
    max_diff = max(diffs)
    same_preds = sum((g.pred, g.pred_norm) == (r.pred, r.pred_norm) for g, r in zip(got, ref, strict=True))
    n = len(items)
    print(f"baseline (one choice per forward): {n / t_naive:8.2f} questions/s  ({t_naive:.1f} s)")
    print(f"toolgym packed (batch={args.batch}):      {n / t_packed:8.2f} questions/s  ({t_packed:.1f} s)")
    print(f"speed-up: {t_naive / t_packed:.2f}x")
    print(f"log-likelihoods: max |diff| = {max_diff:.2e}, median = {statistics.median(diffs):.2e}; "
          f"identical predictions on {same_preds}/{n} questions")
    acc = sum(g.acc for g in got) / n
    acc_norm = sum(g.acc_norm for g in got) / n
    acc_ref = sum(r.acc for r in ref) / n
    acc_norm_ref = sum(r.acc_norm for r in ref) / n
    print(f"acc = {acc:.4f} (baseline {acc_ref:.4f}), acc_norm = {acc_norm:.4f} (baseline {acc_norm_ref:.4f})")
    assert max_diff < 1e-3, f"scores differ: max |diff| {max_diff}"


if __name__ == "__main__":
    main()
