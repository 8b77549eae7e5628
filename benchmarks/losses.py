"""CTPO loss forward+backward time against GRPO's on identical tensors (issue 6 target: ratio <= 1.15).

B=64 sequences x T=4096 tokens on CPU, float32, a realistic mask (model turns, tool-output
spans, right padding). The two losses run interleaved, repeat after repeat, through both
implementations of ``policy_loss``: the one-pass numba kernel (``fused``, what runs on CPU) and
the eager tensor path (``tensor``, what runs on GPUs, ``fused=False``). The script prints the
median time of each and the median of the per-repeat ratios (wall clock, and CPU time of this
process, which other processes on a shared machine disturb less), once for the loss alone
(``compute_metrics=False``) and once with the metrics dictionary (what the trainer runs).

    .venv/bin/python benchmarks/losses.py [--repeats 30] [--threads N] [--json]

glibc gives large freed blocks back to the kernel, so each call's fresh ~1 MB tensors page-fault
again; that penalises whichever loss keeps more tensors alive and is noisy on a loaded machine.
The script therefore also reruns itself with ``MALLOC_TRIM_THRESHOLD_``/``MALLOC_MMAP_THRESHOLD_``
raised (memory kept in the process, as jemalloc/tcmalloc would) and prints both; the
second line isolates the arithmetic CTPO adds (the cumulative sum, the positions and t^p).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

from toolgym.training.policy_gradient.losses import ClipConfig, policy_loss


def make_batch(b: int, t: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random but realistic inputs: per-token log-ratios of std 0.035, tool spans and padding masked."""
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g) * 3.0
    logp = old + torch.randn(b, t, generator=g) * 0.035
    mask = torch.ones(b, t)
    for i in range(b):
        length = int(torch.randint(t // 4, t + 1, (1,), generator=g))
        mask[i, length:] = 0
        for _ in range(3):  # up to three tool-output spans
            start = int(torch.randint(0, max(length - 200, 1), (1,), generator=g))
            mask[i, start : start + int(torch.randint(20, 200, (1,), generator=g))] = 0
    adv = torch.randn(b, generator=g)
    return {"logp": logp, "old": old, "mask": mask, "adv": adv}


def time_once(batch: dict[str, torch.Tensor], ratio: str, clip: ClipConfig, fused: bool,
              metrics: bool) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) for one forward+backward."""
    logp = batch["logp"].clone().requires_grad_(True)
    wall, cpu = time.perf_counter(), time.process_time()
    loss, _ = policy_loss(logp, batch["old"], batch["adv"], batch["mask"], ratio=ratio, clip=clip,
                          agg="token-mean", compute_metrics=metrics, fused=fused)
    loss.backward()
    return time.perf_counter() - wall, time.process_time() - cpu


def run(b: int, t: int, repeats: int, metrics: bool) -> dict[str, dict[str, float]]:
    """Medians per path: ``fused`` (the one-pass CPU kernel, what policy_loss runs on CPU) and ``tensor``
    (the eager tensor path, what runs on GPUs); all four combinations interleaved in each repeat."""
    batch = make_batch(b, t)
    methods = {(path, name): (ratio, clip, path == "fused")
               for path in ("fused", "tensor")
               for name, ratio, clip in (("ctpo", "cumulative", ClipConfig.ctpo()), ("grpo", "token", ClipConfig.grpo()))}
    for key in methods:  # warm-up (and the kernel's compilation)
        for _ in range(3):
            time_once(batch, *methods[key], metrics)
    samples: dict[tuple[str, str], list[tuple[float, float]]] = {key: [] for key in methods}
    for r in range(repeats):
        order = list(methods) if r % 2 == 0 else list(reversed(methods))
        for key in order:
            samples[key].append(time_once(batch, *methods[key], metrics))
    out: dict[str, dict[str, float]] = {}
    for path in ("fused", "tensor"):
        c, g = samples[(path, "ctpo")], samples[(path, "grpo")]
        out[path] = {
            "ctpo_ms": 1e3 * statistics.median(w for w, _ in c),
            "grpo_ms": 1e3 * statistics.median(w for w, _ in g),
            "ratio": statistics.median(cw / gw for (cw, _), (gw, _) in zip(c, g, strict=True)),
            "ctpo_cpu_ms": 1e3 * statistics.median(x for _, x in c),
            "grpo_cpu_ms": 1e3 * statistics.median(x for _, x in g),
            "cpu_ratio": statistics.median(cx / gx for (_, cx), (_, gx) in zip(c, g, strict=True)),
        }
    for name in ("ctpo", "grpo"):  # how much faster the kernel is than the tensor path, per repeat
        out["fused"][f"{name}_speedup_vs_tensor"] = statistics.median(
            tw / fw for (fw, _), (tw, _) in zip(samples[("fused", name)], samples[("tensor", name)], strict=True))
    return out


def breakdown(b: int, t: int, repeats: int) -> dict[str, float]:
    """Median CPU ms of the operations CTPO adds on top of GRPO's path (same tensors, no autograd)."""
    batch = make_batch(b, t)
    delta = (batch["logp"] - batch["old"]).clamp(-20, 20) * batch["mask"]
    mf = batch["mask"]
    row = torch.where(batch["adv"] < 0, -0.025, -1e30).unsqueeze(-1)
    ops = {
        "cumsum of log-ratios": lambda: delta.cumsum(-1),
        "positions + sqrt": lambda: mf.cumsum(-1).sqrt_(),
        "bound tensors (2 muls)": lambda: (row * mf, mf * 0.05),
        "one exp (reference)": lambda: delta.exp(),
    }
    out: dict[str, list[float]] = {k: [] for k in ops}
    for _ in range(repeats):
        for k, f in ops.items():
            c = time.process_time()
            f()
            out[k].append(time.process_time() - c)
    return {k: 1e3 * statistics.median(v) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch default)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-malloc-variant", action="store_true", help="skip the rerun with glibc trimming disabled")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    results = {
        "loss_only": run(args.batch, args.tokens, args.repeats, metrics=False),
        "with_metrics": run(args.batch, args.tokens, args.repeats, metrics=True),
    }
    extra = breakdown(args.batch, args.tokens, args.repeats)
    if args.json:
        print(json.dumps({"B": args.batch, "T": args.tokens, "threads": torch.get_num_threads(), **results,
                          "ctpo_extra_ops_cpu_ms": extra}))
        return
    tuned = "MALLOC_TRIM_THRESHOLD_" in os.environ
    print(f"policy_loss forward+backward, B={args.batch} T={args.tokens} float32 CPU, "
          f"{torch.get_num_threads()} thread(s), {args.repeats} interleaved repeats, medians"
          + (", glibc trimming disabled" if tuned else ""))
    report(results)
    print("  CPU ms of the work CTPO adds (no autograd): "
          + ", ".join(f"{k} {v:.3f}" for k, v in extra.items()))
    if not tuned and not args.no_malloc_variant:
        env = dict(os.environ, MALLOC_TRIM_THRESHOLD_="1000000000", MALLOC_MMAP_THRESHOLD_="1000000000")
        cmd = [sys.executable, __file__, "--batch", str(args.batch), "--tokens", str(args.tokens),
               "--repeats", str(args.repeats), "--threads", str(args.threads), "--json"]
        child = json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout)
        print("same, rerun with glibc trimming disabled (MALLOC_TRIM_THRESHOLD_/MALLOC_MMAP_THRESHOLD_=1e9):")
        report({k: child[k] for k in ("loss_only", "with_metrics")})


def report(results: dict[str, dict[str, dict[str, float]]]) -> None:
    for key, paths in results.items():
        for path, r in paths.items():
            verdict = "ok" if r["ratio"] <= 1.15 else "ABOVE TARGET"
            label = f"{key} {path}"
            print(f"  {label:20s} wall: CTPO {r['ctpo_ms']:6.2f} ms  GRPO {r['grpo_ms']:6.2f} ms  "
                  f"ratio {r['ratio']:.3f} (target <= 1.15: {verdict})   "
                  f"CPU time: CTPO {r['ctpo_cpu_ms']:6.2f} ms  GRPO {r['grpo_cpu_ms']:6.2f} ms  ratio {r['cpu_ratio']:.3f}")
        f = paths["fused"]
        print(f"  {key} speed-up of the fused kernel over the tensor path (wall, per-repeat median; below 1 = "
              f"slower): CTPO {f['ctpo_speedup_vs_tensor']:.2f}x, GRPO {f['grpo_speedup_vs_tensor']:.2f}x")


if __name__ == "__main__":
    main()
