"""kill -9 a real `toolgym train` mid-run, then `--resume`: the next steps' losses and the final weights
equal those of an uninterrupted run (rollouts are seeded per step, the data cursor and optimizer are saved)."""

from __future__ import annotations

import math
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from toolgym.training.outputs.checkpoint import load_weights
from toolgym.training.outputs.logging import read_metrics

from .trainer_util import kill_at_checkpoint, tiny_config

pytestmark = pytest.mark.slow  # measured over 1 s each (the fast tier leaves them out)

TOOLGYM = str(Path(sys.executable).parent / "toolgym")


def _config(tmp: Path, name: str) -> Path:
    # a warm start on direct answers, and a format reward, so that rewards vary within groups
    cfg = tiny_config(tmp / name, steps=4, sft={"enabled": True, "demos": 48, "epochs": 15, "lr": 5e-3, "batch_size": 16,
                                                 "max_seq_len": 64, "tool_fraction": 0.0, "direct_correct": 0.5})
    cfg["rollout"]["env_kwargs"].update(ops="+", format_weight=1.0)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _run(path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([TOOLGYM, "train", str(path), "--no-progress", *extra], capture_output=True, text=True,
                          timeout=900)


def test_kill9_then_resume_matches_uninterrupted_run(tmp_path):
    full = _run(_config(tmp_path, "full"))
    assert full.returncode == 0, full.stderr[-2000:]

    cfg = _config(tmp_path, "killed")
    out = tmp_path / "killed"
    assert kill_at_checkpoint([TOOLGYM, "train", str(cfg), "--no-progress"], out, 2, group=True) == -signal.SIGKILL

    resumed = _run(cfg, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed from" in resumed.stdout + resumed.stderr

    a = {r["step"]: r for r in read_metrics(tmp_path / "full", "train")}
    b = {r["step"]: r for r in read_metrics(out, "train")}
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    assert any(a[s]["adv_zero_groups"] < 2 for s in a), "rewards never varied: the loss comparison would be vacuous"
    for s in (3, 4):
        assert math.isclose(a[s]["loss"], b[s]["loss"], rel_tol=1e-5, abs_tol=1e-7), (s, a[s]["loss"], b[s]["loss"])
        assert a[s]["reward_mean"] == b[s]["reward_mean"]
        assert a[s]["response_tokens"] == b[s]["response_tokens"]
    wa = load_weights(tmp_path / "full" / "checkpoints" / "step-000004")
    wb = load_weights(out / "checkpoints" / "step-000004")
    for k in wa:
        torch.testing.assert_close(wa[k], wb[k], rtol=1e-5, atol=1e-6)
