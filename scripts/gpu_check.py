"""The device check: one call, one ``--budget`` (default 420 s), a verdict from explicit assertions.

CI has no GPU; the device_standin tests prove the GPU path's device rules on a CPU stand-in. This is the part that
needs the real thing (CUDA kernels, bf16 numerics, CUDA memory, throughput), prepared so that the few minutes of
a lent GPU give a verdict. Parts, each with its own deadline carved from the budget (time one part leaves over
goes to the later ones), the JSON report rewritten after every part, warnings captured per part:

  probe     versions, the GPU, the imports the other parts need (fails fast, in one line)
  standin   ``pytest -m device_standin`` on CUDA, a junit file, every skip listed by name (none expected)
  equality  no sampler: CUDA vs CPU loss and gradient norm; prompt sharing on/off in fp32 and bf16; chunked vs
            full head in bf16 with a tied head and LoRA; each first (on-policy) mini-batch has ratio 1, clip 0
  memory    one bf16 update of 4 x 2,048 tokens, chunked vs full head, from torch.cuda.max_memory_allocated
  ctpo      3 CTPO steps at Qwen2.5-0.5B's shape (random weights), full and LoRA, 2 prompts x 4 rows x 32
            tokens: step seconds, decode steps/s, sampled tokens/s, peak memory
  pipeline  4 CTPO steps sampled in a rollout worker process, synchronous (max_staleness 0) and one step ahead
            (1): the schedule (step s sampled by version s - 1), step seconds and each side's idle time
  trl       2 ToolgymGRPOTrainer steps

No network: models are built with random weights and a tokenizer trained on the fly; tasks are generated.
``--device cpu --tiny --image`` is the CPU form (tests/test_gpu_check.py runs it in CI): small shapes, and the
import rules of tests/gpu_image.py, which hide what the GPU image lacks. Exit status: 0 all parts passed, 1 a part
failed (its assertions are in the report), 2 the probe failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
import traceback
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for _p in (str(ROOT), str(ROOT / "src")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

# Qwen2.5-0.5B's shape; SMALL for the equality checks (a CPU reference must run too); TINY for the CPU form
QWEN_05B = {"hidden": 896, "intermediate": 4864, "layers": 24, "heads": 14, "kv_heads": 2, "vocab": 151_936}
SMALL = {"hidden": 256, "intermediate": 512, "layers": 4, "heads": 4, "kv_heads": 2, "vocab": 32_000}
TINY = {"hidden": 64, "intermediate": 128, "layers": 2, "heads": 4, "kv_heads": 2, "vocab": 5_120}
ARITH = {"min_digits": 1, "max_digits": 2, "system_prompt": None, "max_turns": 1, "parser": "none"}
# each part's share of the budget; what a part leaves over is shared by the later ones in these proportions
SHARES = {"probe": 0.05, "standin": 0.30, "equality": 0.13, "memory": 0.08, "ctpo": 0.20, "pipeline": 0.12,
          "trl": 0.12}
REL = {"fp32": 1e-3, "bf16": 3e-2}  # relative tolerance of two paths that compute the same loss
RATIO_TOL = {"fp32": 1e-4, "bf16": 1e-2}  # |ratio - 1| on-policy


def say(text: str) -> None:
    print(text, flush=True)


class PartTimeout(Exception):
    """A part ran past its deadline."""


class Checks:
    """A part's explicit assertions: each is recorded with what was seen; the part passes when all hold."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []

    def that(self, ok: bool, what: str, seen: Any = None) -> bool:
        self.items.append({"ok": bool(ok), "what": what, "seen": seen})
        if not ok:
            say(f"  ASSERTION FAILED: {what} (seen: {seen})")
        return bool(ok)

    def close(self, a: float, b: float, rel: float, what: str) -> bool:
        ok = abs(a - b) <= rel * max(abs(a), abs(b), 1e-8)
        return self.that(ok, f"{what} (rel {rel:g})", {"a": a, "b": b, "rel_diff": abs(a - b) / max(abs(b), 1e-12)})


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise PartTimeout in this (the main) thread once ``seconds`` have passed."""

    def fire(*_: Any) -> None:
        raise PartTimeout(f"past its deadline of {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


class Report:
    """The JSON report, rewritten after every part so that a call cut short still leaves what ran."""

    def __init__(self, path: Path | None, budget: float, args: dict[str, Any]) -> None:
        self.path, self.t0 = path, time.monotonic()
        self.data: dict[str, Any] = {"budget_s": budget, "args": args, "parts": {}, "verdict": "running"}

    def left(self) -> float:
        return self.data["budget_s"] - (time.monotonic() - self.t0)

    def write(self) -> None:
        self.data["elapsed_s"] = round(time.monotonic() - self.t0, 1)
        if self.path:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.data, indent=2, default=str))
            tmp.replace(self.path)


def run_part(report: Report, name: str, fn: Callable[[Checks, float], dict[str, Any]], share_left: float) -> bool:
    """Run one part under its deadline with its warnings captured; record it and rewrite the report."""
    limit = max(report.left(), 0.0) * SHARES[name] / share_left
    say(f"== {name} (deadline {limit:.0f} s of {report.left():.0f} s left)")
    checks, t0 = Checks(), time.monotonic()
    entry: dict[str, Any] = {"start_s": round(report.data["budget_s"] - report.left(), 1), "deadline_s": round(limit, 1)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with deadline(limit):
                entry["result"] = fn(checks, limit)
            entry["status"] = "pass" if all(c["ok"] for c in checks.items) and checks.items else "fail"
        except PartTimeout as exc:
            entry.update(status="timeout", error=str(exc))
        except Exception as exc:  # one part failing must not hide the others
            entry.update(status="error", error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc(limit=10))
            say(traceback.format_exc(limit=10))
    entry["used_s"] = round(time.monotonic() - t0, 1)
    entry["assertions"] = checks.items
    seen: dict[str, int] = {}
    for w in caught:
        key = f"{w.category.__name__}: {str(w.message)[:300]} ({Path(w.filename).name}:{w.lineno})"
        seen[key] = seen.get(key, 0) + 1
    entry["warnings"] = [f"{k} x{n}" if n > 1 else k for k, n in seen.items()]
    report.data["parts"][name] = entry
    report.write()
    say(f"   {name}: {entry['status']} in {entry['used_s']} s ({sum(c['ok'] for c in checks.items)}/"
        f"{len(checks.items)} assertions, {len(entry['warnings'])} distinct warnings)"
        + (f": {entry.get('error')}" if "error" in entry else ""))
    return entry["status"] == "pass"


# ---------------------------------------------------------------- models and configs

def build_model(work: Path, shape: dict[str, int], name: str) -> Path:
    """A Qwen2 model of ``shape`` with random weights, a tied head and a tokenizer trained on the fly."""
    out = work / name
    if (out / "config.json").exists():
        return out
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from toolgym.training.model.demo import train_tokenizer

    corpus = [f"What is {a} + {b}? Answer: {a + b}" for a in range(40) for b in range(40)]
    tok = train_tokenizer(corpus * 2, vocab_size=384)
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=shape["vocab"], hidden_size=shape["hidden"], intermediate_size=shape["intermediate"],
                      num_hidden_layers=shape["layers"], num_attention_heads=shape["heads"],
                      num_key_value_heads=shape["kv_heads"], max_position_embeddings=4096, tie_word_embeddings=True,
                      bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    Qwen2ForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def run_config(work: Path, name: str, model: Path, device: str, *, dtype: str, lora: bool = False, steps: int = 1,
               rows: int = 4, prompts: int = 2, new_tokens: int = 32, **model_over: Any) -> dict[str, Any]:
    """Arith without tools (no sandbox), a reward term that tells any two episodes apart (a random-weight model
    solves nothing, and all-zero advantages would train nothing), the hf sampler, short forced responses."""
    from tests.signal_env import register_signal_arith

    cfg: dict[str, Any] = {
        "algorithm": "ctpo", "seed": 0, "output_dir": str(work / name), "steps": steps, "mini_batches": 1,
        "model": {"name_or_path": str(model), "device": device, "dtype": dtype, **model_over},
        "rollout": {"env": register_signal_arith(), "env_kwargs": ARITH, "group_size": rows,
                    "prompts_per_step": prompts, "max_turns": 1, "max_new_tokens": new_tokens,
                    "max_response_tokens": new_tokens, "temperature": 1.0, "sandbox": None},
        "optimizer": {"lr": 1e-4 if lora else 1e-5},
        "sft": {"enabled": False},
        "eval": {"every": 0, "tasks": 1, "at_start": False},
        "checkpoint": {"every": 0, "keep_last": 1},
        "logging": {"progress": False, "plot": False},
    }
    if lora:
        cfg["model"]["lora"] = {"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": ["q_proj", "v_proj"]}
    return cfg


def handmade_groups(tokenizer: Any, template: Any, n_groups: int, size: int, length: int, vocab: int) -> list[list[Any]]:
    """Groups of fixed random responses (no sampler): the same batch for every path compared."""
    import torch

    from toolgym.agents.trajectory import Trajectory

    g = torch.Generator().manual_seed(0)
    groups = []
    for gi in range(n_groups):
        msgs = [{"role": "user", "content": f"What is {gi} + 1?"}]
        prompt = template.prompt_ids(msgs)
        row = []
        for k in range(size):
            n = length - 3 * k  # rows of different lengths: padding takes part
            resp = torch.randint(3, min(vocab, len(tokenizer)), (n,), generator=g).tolist()
            row.append(Trajectory(task_id=f"t{gi}", group_id=f"g{gi}", prompt_ids=prompt, response_ids=resp,
                                  loss_mask=[1] * n, behavior_logprobs=[-1.0] * n, reward=float(k % 2),
                                  turns=msgs + [{"role": "assistant", "content": "x"}]))
        groups.append(row)
    return groups


def one_update(cfg: dict[str, Any], length: int, vocab: int) -> dict[str, float]:
    """Build a trainer and take one update (one on-policy mini-batch) on fixed groups: its metrics."""
    from toolgym.training.config import load_config
    from toolgym.training.trainer import Trainer

    tr = Trainer(load_config(cfg), console=False)
    tr.build()
    obj = tr.algorithm.objective(tr.cfg)
    tr.objective = obj
    batch, _ = obj.prepare(tr.ctx, handmade_groups(tr.tokenizer, tr.template, 2, 2, length, vocab))
    out = tr.update(batch, obj)
    out["share_prompt_used"] = bool(tr.ctx.share_prompt)
    tr.logger.close()  # no fit(), so nothing else closes its metrics file
    return out


def cuda_peak_gb() -> float | None:
    import torch

    return round(torch.cuda.max_memory_allocated() / 2**30, 3) if torch.cuda.is_available() else None


def reset_peak() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


# ---------------------------------------------------------------- parts

def probe(a: argparse.Namespace, c: Checks, _: float) -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
                           "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    if torch.cuda.is_available():
        out["gpu_memory_gb"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
        out["bf16_supported"] = torch.cuda.is_bf16_supported()
    from tests.gpu_image import stand_in_for_ray

    out["ray"] = "stand-in (tests/gpu_image.py)" if stand_in_for_ray() else "installed"
    for mod in ("transformers", "peft", "gymnasium", "trl", "datasets", "verl", "pytest"):
        try:
            out[mod] = getattr(__import__(mod), "__version__", "?")
        except ImportError as exc:
            out[mod] = None
            c.that(False, f"import {mod}", f"{exc} (carry the wheels: scripts/gpu_wheels.sh)")
    for mod in ("toolgym.training.trainer", "toolgym.integrations.trl", "toolgym.integrations.verl"):
        try:
            __import__(mod)
            c.that(True, f"import {mod}")
        except ImportError as exc:
            c.that(False, f"import {mod}", str(exc))
    c.that(a.device != "cuda" or bool(out.get("bf16_supported")), "the GPU supports bf16", out.get("bf16_supported"))
    return out


def standin_files() -> list[str]:
    """The test files that hold device_standin tests: collecting only them keeps a module-level skip of another
    file (one whose dependency is not on the image) out of the skip list, and collection short."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                  if "mark.device_standin" in p.read_text(encoding="utf-8"))


def standin(a: argparse.Namespace, c: Checks, limit: float) -> dict[str, Any]:
    """The device_standin tests in a child process (its own deadline), with the GPU image's import rules."""
    junit = a.out_dir / "standin.xml"
    args = ["-q", "-m", "device_standin", "-p", "no:cacheprovider", f"--junitxml={junit}",
            "-rs", *(a.standin_args.split() or standin_files())]
    hide = "g.hide_missing()\n" if a.image else ""
    boot = (f"import sys; sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / 'src')!r}]\nfrom tests import gpu_image as g\n"
            f"{hide}g.stand_in_for_ray()\nimport pytest; sys.exit(pytest.main({args!r}))")
    env = {**os.environ, "TOOLGYM_CHECK_TINY_MODEL": str(build_model(a.work, TINY, "tiny-trl"))}
    t0 = time.monotonic()
    with open(a.out_dir / "standin.log", "w") as log:
        p = subprocess.Popen([sys.executable, "-c", boot], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
                             start_new_session=True)
        try:
            rc = p.wait(timeout=max(limit - 5, 1))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            rc = None
    out: dict[str, Any] = {"returncode": rc, "wall_s": round(time.monotonic() - t0, 1)}
    c.that(rc is not None, "pytest finished within its deadline", out["wall_s"])
    if not junit.exists():
        c.that(False, "pytest wrote the junit file", (a.out_dir / "standin.log").read_text()[-2000:])
        return out
    cases = ET.parse(junit).getroot().iter("testcase")
    failed, skipped, passed = [], [], 0
    for tc in cases:
        name = f"{tc.get('classname')}::{tc.get('name')}"
        bad = tc.find("failure") if tc.find("failure") is not None else tc.find("error")
        if bad is not None:
            failed.append(f"{name}: {(bad.get('message') or '')[:300]}")
        elif tc.find("skipped") is not None:
            skipped.append(f"{name}: {(tc.find('skipped').get('message') or '')[:300]}")
        else:
            passed += 1
    out.update(passed=passed, failed=failed, skipped=skipped)
    say(f"  passed {passed}, failed {len(failed)}, skipped {len(skipped)}")
    for line in failed + skipped:
        say(f"    {line}")
    c.that(passed > 0, "device_standin tests ran", passed)
    c.that(not failed, "no device_standin test failed", failed)
    c.that(not skipped, "no device_standin test skipped", skipped)
    c.that(rc == 0, "pytest exit status 0", rc)
    return out


def equality(a: argparse.Namespace, c: Checks, _: float) -> dict[str, Any]:
    """The same update on fixed batches through paths that must agree."""
    shape = TINY if a.tiny else SMALL
    model = build_model(a.work, shape, "tiny" if a.tiny else "small")
    length = 12 if a.tiny else 96
    dev = a.device
    per_row, shared = {"share_prompt": "off"}, {"share_prompt": "on"}  # sharing runs on the (default) chunked head
    cases = {  # name: (device, dtype, lora, model options)
        "cpu fp32 per-row": ("cpu", "fp32", False, per_row),
        "dev fp32 per-row": (dev, "fp32", False, per_row),
        "dev fp32 shared": (dev, "fp32", False, shared),
        "dev bf16 per-row": (dev, "bf16", False, per_row),
        "dev bf16 shared": (dev, "bf16", False, shared),
        "dev bf16 lora per-row full-head": (dev, "bf16", True, {**per_row, "logprob_head": "full"}),
        "dev bf16 lora per-row chunked": (dev, "bf16", True, per_row),
    }
    res: dict[str, Any] = {}
    for name, (d, dtype, lora, over) in cases.items():
        cfg = run_config(a.work, "eq-" + name.replace(" ", "-"), model, d, dtype=dtype, lora=lora, **over)
        if lora:
            cfg["model"]["lora"]["dropout"] = 0.0
        m = one_update(cfg, length, shape["vocab"])
        res[name] = {k: m.get(k) for k in ("loss", "grad_norm", "ratio_mean", "ratio_min", "ratio_max", "clip_frac",
                                           "share_prompt_used")}
        say(f"  {name:32s} loss {m['loss']:+.6e}  grad norm {m['grad_norm']:.6e}  ratio {m.get('ratio_mean')}  "
            f"clip {m.get('clip_frac')}")
        c.that(m.get("share_prompt_used") == (over["share_prompt"] == "on"), f"{name}: prompt sharing as asked",
               m.get("share_prompt_used"))
        c.that(abs(float(m.get("ratio_mean", float("nan"))) - 1) <= RATIO_TOL[dtype], f"{name}: on-policy ratio 1",
               m.get("ratio_mean"))
        c.that(m.get("clip_frac") == 0, f"{name}: on-policy clip 0", m.get("clip_frac"))
    pairs = [("dev fp32 per-row", "cpu fp32 per-row", "fp32"),
             ("dev fp32 shared", "dev fp32 per-row", "fp32"),
             ("dev bf16 shared", "dev bf16 per-row", "bf16"),
             ("dev bf16 per-row", "dev fp32 per-row", "bf16"),
             ("dev bf16 lora per-row chunked", "dev bf16 lora per-row full-head", "bf16")]
    for x, y, dtype in pairs:
        for key in ("loss", "grad_norm"):
            c.close(res[x][key], res[y][key], REL[dtype], f"{key}: {x} = {y}")
    return res


def memory(a: argparse.Namespace, c: Checks, _: float) -> dict[str, Any]:
    """Peak CUDA memory of one bf16 update of 4 rows x 2,048 response tokens, chunked vs full head."""
    shape = TINY if a.tiny else QWEN_05B
    model = build_model(a.work, shape, "tiny" if a.tiny else "qwen2-0.5b-shape")
    length = 64 if a.tiny else 2048
    res: dict[str, Any] = {"rows": 4, "response_tokens": length}
    for head in ("chunked", "full"):
        reset_peak()
        t0 = time.perf_counter()
        cfg = run_config(a.work, f"mem-{head}", model, a.device, dtype="bf16" if a.device != "cpu" else "fp32",
                         share_prompt="off", logprob_head=head)
        m = one_update(cfg, length, shape["vocab"])
        res[head] = {"peak_gb": cuda_peak_gb(), "s": round(time.perf_counter() - t0, 1), "loss": m["loss"]}
        say(f"  {head:8s} peak {res[head]['peak_gb']} GB  ({res[head]['s']} s, loss {m['loss']:+.5e})")
        c.that(m["loss"] == m["loss"], f"{head}: finite loss", m["loss"])
    if a.device == "cuda":
        c.that(res["chunked"]["peak_gb"] < res["full"]["peak_gb"], "the chunked head peaks below the full head",
               [res["chunked"]["peak_gb"], res["full"]["peak_gb"]])
    return res


def ctpo(a: argparse.Namespace, c: Checks, _: float) -> dict[str, Any]:
    """3 CTPO steps with the hf sampler, full fine-tune and LoRA: 2 prompts x 4 rows x at most 32 new tokens."""
    from toolgym.training.config import load_config
    from toolgym.training.outputs.logging import read_metrics
    from toolgym.training.trainer import Trainer

    shape = TINY if a.tiny else QWEN_05B
    model = build_model(a.work, shape, "tiny" if a.tiny else "qwen2-0.5b-shape")
    new = 8 if a.tiny else 32
    res: dict[str, Any] = {}
    for lora in (False, True):
        name = "lora" if lora else "full"
        reset_peak()
        cfg = run_config(a.work, f"ctpo-{name}", model, a.device, dtype="bf16" if a.device != "cpu" else "fp32",
                         lora=lora, steps=3, new_tokens=new)
        cfg["mini_batches"] = 2  # one group each: the second is off-policy, so ratio and clip take part
        t0 = time.perf_counter()
        Trainer(load_config(cfg), console=False).fit()
        rows = [r for r in read_metrics(a.work / f"ctpo-{name}") if r["kind"] == "train"]
        sampled = [r["episodes"] * r["policy_tokens"] for r in rows]
        out = {"steps": len(rows), "wall_s": round(time.perf_counter() - t0, 1),
               "step_s": [round(r["step_s"], 2) for r in rows], "rollout_s": [round(r["rollout_s"], 2) for r in rows],
               "decode_steps_per_s": [round(r["response_tokens"] / max(r["rollout_s"], 1e-9), 1) for r in rows],
               "sampled_tokens_per_s": [round(s / max(r["rollout_s"], 1e-9), 1) for s, r in zip(sampled, rows, strict=True)],
               "update_tokens_per_s": [round(r["tokens_per_s"], 1) for r in rows],
               "loss": [r.get("loss") for r in rows], "peak_gb": cuda_peak_gb()}
        res[name] = out
        say(f"  {name}: {json.dumps(out)}")
        c.that(out["steps"] == 3, f"{name}: 3 steps", out["steps"])
        c.that(all(x == x for x in out["loss"]), f"{name}: finite losses", out["loss"])
        c.that(all(r["response_tokens"] <= new for r in rows), f"{name}: responses within {new} tokens",
               [r["response_tokens"] for r in rows])
    return res


def pipeline(a: argparse.Namespace, c: Checks, _: float) -> dict[str, Any]:
    """The asynchronous pipeline on the device: a rollout worker process samples (on the same GPU), the trainer
    updates; max_staleness 0 and 1 side by side, 4 steps each."""
    from tests.signal_env import SIGNAL_ARITH_REF
    from toolgym.training.config import load_config
    from toolgym.training.outputs.logging import read_metrics
    from toolgym.training.trainer import Trainer

    shape = TINY if a.tiny else QWEN_05B
    model = build_model(a.work, shape, "tiny" if a.tiny else "qwen2-0.5b-shape")
    res: dict[str, Any] = {}
    for k in (0, 1):
        cfg = run_config(a.work, f"pipeline-k{k}", model, a.device, dtype="bf16" if a.device != "cpu" else "fp32",
                         steps=4, new_tokens=8 if a.tiny else 32)
        # the workers import the env's module themselves: give it as module:id
        cfg["rollout"].update(max_staleness=k, workers=1, env=SIGNAL_ARITH_REF)
        t0 = time.perf_counter()
        Trainer(load_config(cfg), console=False).fit()
        rows = [r for r in read_metrics(a.work / f"pipeline-k{k}") if r["kind"] == "train"]
        span = rows[-1]["time"] - rows[0]["time"]
        out = {"steps": len(rows), "wall_s": round(time.perf_counter() - t0, 1),
               "step_s_after_first": round(span / max(len(rows) - 1, 1), 2),
               "trainer_idle_s": [round(r.get("trainer_idle_s", r["rollout_s"]), 2) for r in rows],
               "sampler_idle_s": [round(r.get("sampler_idle_s", 0.0), 2) for r in rows],
               "update_s": [round(r["update_s"], 2) for r in rows], "loss": [r.get("loss") for r in rows],
               "staleness": [r.get("staleness_mean", 0.0) for r in rows]}
        res[f"k{k}"] = out
        say(f"  max_staleness {k}: {json.dumps(out)}")
        c.that(out["steps"] == 4, f"k={k}: 4 steps", out["steps"])
        c.that(all(x == x for x in out["loss"]), f"k={k}: finite losses", out["loss"])
        if k:
            c.that(out["staleness"] == [0.0, 1.0, 1.0, 1.0], "k=1: step s sampled by version s - 1",
                   out["staleness"])
    res["k1_over_k0_steps_per_s"] = round(res["k0"]["step_s_after_first"] / max(res["k1"]["step_s_after_first"], 1e-9), 2)
    say(f"  async/sync steps per second {res['k1_over_k0_steps_per_s']}x (K=1, one worker)")
    return res


def trl(a: argparse.Namespace, c: Checks, _: float) -> dict[str, Any]:
    """Two ToolgymGRPOTrainer steps (CTPO, num_iterations=2 so the second pass is off-policy)."""
    from trl import GRPOConfig

    from tests.signal_env import sample_fingerprint
    from toolgym.integrations.trl import ToolgymGRPOTrainer, env_dataset, env_reward

    model = build_model(a.work, TINY if a.tiny else QWEN_05B, "tiny" if a.tiny else "qwen2-0.5b-shape")
    reset_peak()
    args = GRPOConfig(output_dir=str(a.work / "trl"), per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=8 if a.tiny else 32, max_steps=2, num_iterations=2, learning_rate=1e-5,
                      logging_steps=1, report_to=[], save_strategy="no", seed=0, bf16=a.device == "cuda",
                      use_cpu=a.device == "cpu", gradient_checkpointing=False)

    def fingerprint(completions: list[Any], **_: Any) -> list[float]:  # reward spread for a random-weight model
        return [sample_fingerprint([{"role": "assistant", "content": str(x)}]) for x in completions]

    t0 = time.perf_counter()
    tr = ToolgymGRPOTrainer(str(model), algorithm="ctpo", args=args,
                            reward_funcs=[env_reward("toolgym/Arith-v0", **ARITH), fingerprint],
                            train_dataset=env_dataset("toolgym/Arith-v0", 16, **ARITH))
    tr.train()
    logs = [h for h in tr.state.log_history if "loss" in h]
    res = {"steps": tr.state.global_step, "wall_s": round(time.perf_counter() - t0, 1),
           "loss": [h["loss"] for h in logs], "clip_frac": [h.get("toolgym/clip_frac") for h in logs],
           "peak_gb": cuda_peak_gb()}
    say(f"  {json.dumps(res)}")
    c.that(res["steps"] == 2, "2 TRL steps", res["steps"])
    c.that(all(x == x for x in res["loss"]) and bool(res["loss"]), "finite TRL losses", res["loss"])
    return res


PARTS: dict[str, Callable[[argparse.Namespace, Checks, float], dict[str, Any]]] = {
    "probe": probe, "standin": standin, "equality": equality, "memory": memory, "ctpo": ctpo, "pipeline": pipeline,
    "trl": trl}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--budget", type=float, default=420.0, help="seconds for all parts together (default 420)")
    ap.add_argument("--tiny", action="store_true", help="small shapes (the CPU form)")
    ap.add_argument("--image", action="store_true", help="the GPU image's import rules (tests/gpu_image.py)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/toolgym-gpu-check"))
    ap.add_argument("--out", type=Path, default=Path("gpu_check_out"), help="folder for gpu_check.json and logs")
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--standin-args", default="", help="pytest targets and options of the standin part (default: "
                    "tests, every device_standin test)")
    a = ap.parse_args()
    wanted = [p for p in PARTS if p in a.parts.split(",")]
    if a.image:
        from tests.gpu_image import hide_missing

        hide_missing()
    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        say("gpu_check: no CUDA device visible (torch.cuda.is_available() is False); use --device cpu --tiny for the "
            "CPU form")
        return 2
    a.out, a.work = a.out.resolve(), a.work.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    a.work.mkdir(parents=True, exist_ok=True)
    a.out_dir = a.out
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    report = Report(a.out / "gpu_check.json", a.budget, {k: str(v) for k, v in vars(a).items()})
    report.write()
    ok = True
    for i, name in enumerate(wanted):
        passed = run_part(report, name, lambda c, lim, f=PARTS[name]: f(a, c, lim),
                          sum(SHARES[p] for p in wanted[i:]))
        ok = ok and passed
        if name == "probe" and not passed:
            failed = [f"{x['what']}: {x['seen']}" for x in report.data["parts"]["probe"]["assertions"] if not x["ok"]]
            report.data["verdict"] = "probe failed"
            report.write()
            say(f"gpu_check: the probe failed: {'; '.join(failed) or report.data['parts']['probe'].get('error')}")
            return 2
    report.data["verdict"] = "pass" if ok else "fail"
    report.data["part_seconds"] = {k: v["used_s"] for k, v in report.data["parts"].items()}
    report.write()
    bad = [k for k, v in report.data["parts"].items() if v["status"] != "pass"]
    say(f"gpu_check: {'PASS' if ok else 'FAIL: ' + ', '.join(bad)} in {report.data['elapsed_s']} s of "
        f"{a.budget:.0f} s; report {a.out / 'gpu_check.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
