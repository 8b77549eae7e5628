"""`rollout.sampler: vllm` in the trainer, with the real vLLM CPU build (.venv-vllm): after every weight push
the engine samples the trainer's policy (its log-probs of the freshly sampled tokens equal the trainer's
recomputation), and the exported final checkpoint loads in vLLM and transformers with the same log-probs.
Full fine-tuning and LoRA (merged weights pushed). Under CI=true these run and fail when a part is missing."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from tests.agents.conftest import asset_dir
from tests.requirements import long_checks, need

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-vllm"
ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_TARGET_DEVICE": "cpu", "TOKENIZERS_PARALLELISM": "false",
       "HF_HUB_OFFLINE": "1"}
# vLLM's CPU kernels vs the trainer's transformers forward, both float32, at temperature 0.8: measured
# max |gap| 2.4e-5 .. 5.7e-5 nats per token over 6 steps; the bound leaves ~20x room and stays far below
# what a missed push shows (the trained policy differs from the initial one by > 1e-2 per token).
GAP_MAX = 1e-3
# The short form CI runs trains 2 steps, the long form (TOOLGYM_LONG_CHECKS=1) 3: step 2 is the first sampled
# after an update's push, so 2 steps keep every property checked here (each step's gap bound after a push,
# the pushes counted, the export served by vLLM equal to transformers and away from the initial policy).
STEPS = 3 if long_checks() else 2


def _run(tmp_path: Path, mode: str) -> dict:
    need((VENV / "bin" / "python").exists(), f"{VENV} is missing: run scripts/setup_vllm.sh")
    need(asset_dir("smollm2-135m-instruct") is not None, "the smollm2-135m-instruct asset is missing")
    script = Path(__file__).with_name("vllm_train_script.py")
    res = subprocess.run([str(VENV / "bin" / "python"), str(script), str(tmp_path / "run"), mode, str(STEPS)],
                         capture_output=True, text=True, timeout=1700, env={**os.environ, **ENV})
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
    assert res.returncode == 0 and lines, res.stdout[-3000:] + res.stderr[-6000:]
    r = json.loads(lines[-1][len("RESULT "):])
    print(f"{mode}, {STEPS} steps: {r['seconds']}")  # where the time goes (pytest -s shows it)
    return r


def _check(r: dict) -> None:
    train = r["train"]
    assert r["summary_steps"] == STEPS and [row["step"] for row in train] == list(range(1, STEPS + 1))
    # one push after setup, then one after each update
    assert [row["weight_pushes"] for row in train] == list(range(2, STEPS + 2))
    for row in train:
        assert row["behaviour_gap_max"] is not None and row["behaviour_gap_max"] < GAP_MAX, row
        assert math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"]), row
        assert 0.0 <= row["reward_mean"] <= 1.0 and row["episodes"] == 4 and row["errors"] == 0, row
        # the script's reward tells any two different episodes apart, so each step updates the policy and the
        # next step's gap check would see a skipped push (both groups of two identical would fail here)
        assert row["adv_zero_groups"] < 2, row
    assert len(r["evals"]) == 2 and all(0.0 <= e <= 1.0 for e in r["evals"])
    ex = r["export"]
    assert ex["tokens"] > 0
    assert ex["vllm_vs_transformers_max"] < GAP_MAX, ex  # the export, served by vLLM, is the trainer's policy
    # training moved the policy by far more than the gap bound: a push that was skipped would have shown
    assert ex["trained_vs_initial_mean"] > 10 * GAP_MAX, ex


@pytest.mark.long
def test_ctpo_with_vllm_sampler_full_finetune(tmp_path):
    _check(_run(tmp_path, "full"))


@pytest.mark.long
def test_ctpo_with_vllm_sampler_lora_merged_push(tmp_path):
    _check(_run(tmp_path, "lora"))
