"""Peak memory and time of one trainer update, the old log-prob path against the new one, each side in its own
process (target: the update's peak after <= 35% of before, its time no worse).

* before: ``model.logprob_head: full`` and one micro-batch (what the trainer did before issue 24): the model's
  logits at every position, each row's float32 log-softmax kept for backward;
* after: ``model.logprob_head: chunked`` and ``max_tokens_per_micro_batch`` (default: one row's tokens).

Each side is one child process: it builds the trainer (CTPO, one mini-batch, the model from ``--model``), makes
``--rows`` trajectories of ``--tokens`` tokens (a short chat prompt, then fixed random response ids), computes
the old log-probs (the no-grad pass, ``objective.prepare``), then runs one ``Trainer.update`` (forward,
backward, AdamW step). For each phase it measures the process's peak memory, the wall time and the CPU time
(all threads: steadier than wall time on a machine other jobs share). Peak memory
is the peak resident set size (``VmHWM``, reset through ``/proc/self/clear_refs`` at the start of the phase)
or, where pages went to swap, the peak of resident + swapped memory sampled every 20 ms, whichever is larger.
A side that swapped is flagged: its time then includes swapping and the time ratio is not like for like.
The resident set also holds heap that glibc keeps after tensors are freed (blocks under its dynamic mmap
threshold, up to 32 MB); ``--malloc-mmap-threshold`` makes both sides give such blocks back at once.

At 8 x 2,048 tokens the before side needs more memory than a 24 GB machine has (logits alone are ~10 GB in
float32 at Qwen's 151,936-token vocabulary, the saved log-softmax as much again, and the backward of each
row's slice of the logits builds a logits-sized gradient). To measure it there, run the script in a
memory-capped cgroup with swap available; the sampled resident + swapped peak is then the side's peak.

    .venv/bin/python benchmarks/update_memory.py [--model qwen2.5-coder-0.5b-instruct] [--rows 8] [--tokens 2048]
        [--budget TOKENS] [--gradient-checkpointing] [--lora] [--dtype fp32|bf16] [--sides before after]
        [--threads N] [--malloc-mmap-threshold BYTES] [--random-init] [--json]

``--random-init`` builds the model from its config and tokenizer files with random weights (memory and time do
not depend on the weights' values), so a machine with more memory but without the weights can run it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

GB = 1e9


def _status_kb(*keys: str) -> dict[str, int]:
    out = dict.fromkeys(keys, 0)
    with open("/proc/self/status") as f:
        for line in f:
            name = line.split(":", 1)[0]
            if name in out:
                out[name] = int(line.split()[1])
    return out


class PeakMemory:
    """The phase's peak: ``VmHWM`` since a reset, and resident + swapped memory sampled every 20 ms."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self.peak_kb = 0
        self.swap_kb = 0

    def __enter__(self) -> PeakMemory:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM := the current RSS
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            s = _status_kb("VmRSS", "VmSwap")
            self.peak_kb = max(self.peak_kb, s["VmRSS"] + s["VmSwap"])
            self.swap_kb = max(self.swap_kb, s["VmSwap"])

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_kb = max(self.peak_kb, _status_kb("VmHWM")["VmHWM"])


def run_side(a: argparse.Namespace) -> dict[str, Any]:
    """One side, in this process: build, old log-probs, one update; peaks and times of both phases."""
    import torch

    from toolgym.agents.trajectory import Trajectory
    from toolgym.training.config import load_config
    from toolgym.training.trainer import Trainer

    if a.threads:
        torch.set_num_threads(a.threads)
    before = a.side == "before"
    model: dict[str, Any] = {"name_or_path": a.model, "dtype": a.dtype, "gradient_checkpointing": a.gradient_checkpointing,
                             "logprob_head": "full" if before else "chunked"}
    if a.lora:
        model["lora"] = {"r": 16, "alpha": 32, "target_modules": "all-linear"}
    out_dir = tempfile.mkdtemp(prefix="update_memory_run_")
    cfg = load_config({"algorithm": "ctpo", "output_dir": out_dir, "mini_batches": 1, "steps": 1,
                       "model": model, "max_tokens_per_micro_batch": None if before else (a.budget or a.tokens),
                       "rollout": {"prompts_per_step": 1, "group_size": a.rows, "sandbox": None},
                       "optimizer": {"lr": 1e-6}, "eval": {"every": 0, "at_start": False},
                       "logging": {"progress": False, "jsonl": False, "plot": False}})
    tr = Trainer(cfg, console=False)
    tr.build()
    obj = tr.algorithm.objective(cfg)
    prompt = tr.template.prompt_ids([{"role": "user", "content": "Write a Python function that returns the n-th "
                                                                 "Fibonacci number, with tests."}])
    n = a.tokens - len(prompt)
    if n < 1:
        raise SystemExit(f"--tokens {a.tokens} leaves no room for a response after the {len(prompt)}-token prompt")
    g = torch.Generator().manual_seed(0)
    vocab = len(tr.tokenizer)
    group = [Trajectory(task_id="t", group_id="g", prompt_ids=prompt, response_ids=torch.randint(0, vocab, (n,), generator=g).tolist(),
                        loss_mask=[1] * n, behavior_logprobs=[-1.0] * n, reward=float(k % 2)) for k in range(a.rows)]
    res: dict[str, Any] = {"side": a.side, "head": model["logprob_head"], "budget": cfg.max_tokens_per_micro_batch,
                           "rss_start_gb": _status_kb("VmRSS")["VmRSS"] * 1024 / GB}
    with PeakMemory() as pm:
        t, c = time.perf_counter(), time.process_time()
        batch, _ = obj.prepare(tr.ctx, [group])
        res["old_s"], res["old_cpu_s"] = time.perf_counter() - t, time.process_time() - c
    res["old_peak_gb"], res["old_swap_gb"] = pm.peak_kb * 1024 / GB, pm.swap_kb * 1024 / GB
    calls: list[int] = []
    loss_fn = obj.loss
    obj.loss = lambda ctx, b, rows, *x: (calls.append(len(rows)), loss_fn(ctx, b, rows, *x))[1]
    with PeakMemory() as pm:
        t, c = time.perf_counter(), time.process_time()
        out = tr.update(batch, obj)
        res["update_s"], res["update_cpu_s"] = time.perf_counter() - t, time.process_time() - c
    res["update_peak_gb"], res["update_swap_gb"] = pm.peak_kb * 1024 / GB, pm.swap_kb * 1024 / GB
    res.update(micro_batches=calls, loss=out["loss"], grad_norm=out["grad_norm"], threads=torch.get_num_threads(),
               params_gb=sum(p.numel() * p.element_size() for p in tr.module.parameters()) / GB)
    shutil.rmtree(out_dir, ignore_errors=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=2048, help="prompt + response tokens per row")
    ap.add_argument("--budget", type=int, default=0, help="after: max_tokens_per_micro_batch (default: --tokens)")
    ap.add_argument("--gradient-checkpointing", action="store_true", help="on both sides")
    ap.add_argument("--lora", action="store_true", help="LoRA (r 16, all linear layers) on both sides")
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--sides", nargs="+", choices=["before", "after"], default=["before", "after"])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--malloc-mmap-threshold", type=int, default=0, metavar="BYTES",
                    help="glibc MALLOC_MMAP_THRESHOLD_ for both sides: blocks from this size up go back to the "
                         "system when freed, so the RSS follows live tensors (as CUDA's max allocated does) instead "
                         "of freed heap glibc keeps; costs page faults (0: glibc's default)")
    ap.add_argument("--random-init", action="store_true",
                    help="random weights from the model's config and tokenizer files (memory and time do not depend "
                         "on the weights' values): for a machine that has those small files but not the weights")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--side", choices=["before", "after"], help=argparse.SUPPRESS)  # a child process
    a = ap.parse_args()
    if a.side:
        print("RESULT " + json.dumps(run_side(a)), flush=True)
        return
    made = _random_init(a.model) if a.random_init else None
    try:
        results = _run_sides(a, made or a.model)
    finally:
        if made:
            shutil.rmtree(made, ignore_errors=True)
    summary = _ratios(results)
    if a.json:
        print(json.dumps({"args": {k: v for k, v in vars(a).items() if k != "side"}, "results": results, **summary}))
        return
    _print(a, results, summary)


def _run_sides(a: argparse.Namespace, model: str) -> dict[str, Any]:
    """Each side in a child process of its own; a side that fails (e.g. killed at a memory cap) says so."""
    results: dict[str, Any] = {}
    for side in a.sides:
        child = [sys.executable, __file__, "--model", model, "--rows", str(a.rows), "--tokens", str(a.tokens),
                 "--budget", str(a.budget), "--dtype", a.dtype, "--threads", str(a.threads), "--side", side]
        child += ["--gradient-checkpointing"] * a.gradient_checkpointing + ["--lora"] * a.lora
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if a.malloc_mmap_threshold:
            env["MALLOC_MMAP_THRESHOLD_"] = str(a.malloc_mmap_threshold)
        p = subprocess.run(child, capture_output=True, text=True, env=env)
        line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if p.returncode or line is None:  # e.g. killed by the OOM killer of a memory cap
            results[side] = {"side": side, "failed": f"exit {p.returncode}", "stderr": p.stderr[-2000:]}
        else:
            results[side] = json.loads(line[len("RESULT "):])
    return results


def _print(a: argparse.Namespace, results: dict[str, Any], summary: dict[str, Any]) -> None:
    print(f"{a.model}{' (random weights)' if a.random_init else ''}: {a.rows} x {a.tokens} tokens, dtype {a.dtype}, "
          f"{'LoRA' if a.lora else 'full fine-tuning'}, gradient checkpointing {'on' if a.gradient_checkpointing else 'off'}"
          + (f", MALLOC_MMAP_THRESHOLD_={a.malloc_mmap_threshold}" if a.malloc_mmap_threshold else ""))
    print(f"{'side':7} {'head':8} {'micro-batches (rows)':22} {'old log-probs':>32} {'update':>32} {'grad norm':>12}")
    for side, r in results.items():
        if "failed" in r:
            print(f"{side:7} failed ({r['failed']}): {r['stderr'].strip().splitlines()[-1] if r['stderr'].strip() else ''}")
            continue
        mb = ",".join(str(c) for c in r["micro_batches"])
        print(f"{side:7} {r['head']:8} {mb:22} {_cell(r, 'old'):>32} {_cell(r, 'update'):>32} {r['grad_norm']:12.6g}")
    for key, value in summary.items():
        print(f"{key}: {value}")


def _random_init(name: str) -> str:
    """A folder with a randomly initialised model of ``name``'s config (an asset name or a folder) and its
    tokenizer."""
    import torch
    import transformers

    try:
        from toolgym.assets import asset_path

        src = str(asset_path(name))
    except Exception:  # a folder
        src = name
    out = tempfile.mkdtemp(prefix="update_memory_")
    config = transformers.AutoConfig.from_pretrained(src)
    torch.manual_seed(0)
    transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(out)
    transformers.AutoTokenizer.from_pretrained(src).save_pretrained(out)
    return out


def _cell(r: dict[str, Any], phase: str) -> str:
    swap = f" (swap {r[phase + '_swap_gb']:.1f})" if r[phase + "_swap_gb"] > 0 else ""
    return f"{r[phase + '_peak_gb']:.2f} GB{swap} {r[phase + '_s']:.0f} s ({r[phase + '_cpu_s']:.0f} cpu)"


def _ratios(results: dict[str, Any]) -> dict[str, Any]:
    b, a = results.get("before"), results.get("after")
    if not b or not a or "failed" in b or "failed" in a:
        return {}
    out: dict[str, Any] = {}
    for phase in ("update", "old"):
        out[f"{phase} peak after/before"] = round(a[f"{phase}_peak_gb"] / b[f"{phase}_peak_gb"], 3)
        out[f"{phase} time after/before"] = round(a[f"{phase}_s"] / b[f"{phase}_s"], 3)
        out[f"{phase} cpu time after/before"] = round(a[f"{phase}_cpu_s"] / b[f"{phase}_cpu_s"], 3)
    out["targets"] = "update peak <= 0.35, update time <= 1.0 (wall time on a busy machine: read the cpu time too)"
    if any(r[f"{p}_swap_gb"] > 0 for r in (a, b) for p in ("update", "old")):
        out["note"] = "a side swapped: its time includes swapping, so the time ratios are not like for like"
    return out


if __name__ == "__main__":
    main()
