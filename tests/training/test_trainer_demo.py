"""End to end: the quickstart's main job (examples/arith_ctpo.yaml) through the real CLI, shortened.

Checks the whole pipeline (demo model + tokenizer, SFT warm start on demonstrations, RL with the
sandboxed Python tool, evals, checkpoints, table and plot), not the size of the improvement: that is
measured by examples/arith_sft_ctpo.py and reported in docs/results/cpu-demo.md.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from toolgym.training.outputs.logging import read_metrics

pytestmark = pytest.mark.slow  # measured over 1 s each (the fast tier leaves them out)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_readme_main_job_runs_end_to_end(tmp_path):
    out = tmp_path / "run"
    p = subprocess.run([str(Path(sys.executable).parent / "toolgym"), "train", str(ROOT / "examples" / "arith_ctpo.yaml"),
                        "-o", str(out), "--no-progress", "-s", "steps=3", "-s", "eval.every=3", "-s", "eval.tasks=16",
                        "-s", "sft.demos=1200", "-s", "sft.epochs=2", "-s", "checkpoint.every=2"],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "| before RL | 0 |" in p.stdout and "| after RL | 3 |" in p.stdout
    assert f"plot: {out / 'curves.png'}" in p.stdout
    # the demo saves its steps' rollouts and ends with the command that shows them
    assert p.stdout.splitlines()[-1] == f"rollouts: toolgym rollouts view {out / 'rollouts' / 'step-0003.jsonl'}"
    recs = read_metrics(out)
    train = [r for r in recs if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2, 3]
    assert all(r["errors"] == 0 and r["optimizer_steps"] == 4 for r in train)
    sft = next(r for r in recs if r["kind"] == "sft")
    assert sft["demonstrations"] == 1200
    # the warm-started policy uses the sandboxed tool part of the time, and the tool really ran
    assert 0.0 < train[0]["tool_rate"] < 1.0
    assert (out / "checkpoints" / "step-000002").exists() and (out / "curves.png").exists()


@pytest.mark.slow
def test_multi_part_example_runs_whole_episodes(tmp_path):
    """examples/arith_parts.yaml (benchmarks/ctpo_regime.py's config), shortened: every episode asks its six
    questions in turn, so responses are long and the policy tokens of one episode span several turns."""
    out = tmp_path / "parts"
    p = subprocess.run([str(Path(sys.executable).parent / "toolgym"), "train", str(ROOT / "examples" / "arith_parts.yaml"),
                        "-o", str(out), "--no-progress", "-s", "steps=1", "-s", "eval.every=1", "-s", "eval.tasks=8",
                        "-s", "sft.demos=300", "-s", "sft.epochs=1", "-s", "rollout.prompts_per_step=2",
                        "-s", "rollout.group_size=4", "-s", "mini_batches=2"],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    recs = read_metrics(out)
    (train,) = [r for r in recs if r["kind"] == "train"]
    assert train["errors"] == 0 and train["episodes"] == 8
    # six question/answer rounds: far more sampled tokens than one part's ~16, and between them the
    # environment's questions, tool outputs and template tokens (not trained on)
    assert train["policy_tokens"] > 40 and train["response_tokens"] - train["policy_tokens"] > 40
    assert 0.0 <= train["reward_mean"] <= 1.0
