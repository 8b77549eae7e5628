"""Journey (a): an environment of your own, written as the README shows, from "written" to "checked" to
"trained" (from a script and from `toolgym train`) to "viewed" to "evaluated", in an empty folder with the public
CLI and API only. The steps are the blocks of docs/walkthrough.md, run in order, so the page is this test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from tests.docs.test_commands import blocks_of
from tests.journeys.user import ROOT, readme_block

PAGE = ROOT / "docs" / "walkthrough.md"


def test_the_walkthrough_writes_the_readmes_environment() -> None:
    """The page's environment is the README's, to the character: the journey is the README's journey."""
    first = blocks_of(PAGE)[0].code
    assert readme_block("Register an environment") in first


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_own_environment_from_written_to_evaluated(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    spec = tmp_path / "blocks.json"
    spec.write_text(json.dumps([asdict(b) for b in blocks_of(PAGE)]))
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "docs" / "run_blocks.py"), str(spec)], cwd=home,
                          env=env, capture_output=True, text=True, timeout=1500, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{proc.stderr[-6000:]}\n--- stdout:\n{proc.stdout[-3000:]}"
    out = proc.stdout

    # checked: every way a run builds it, then the contract
    assert "ok   builds for training rollouts (partition='train', sandbox=...)" in out
    assert "ok   the train and test partitions share no task" in out
    assert "reverse_env:myorg/Reverse-v0: 17/17 checks passed" in out

    # trained, from the CLI and from the script: a step with a reward, held-out evaluations before and after
    for run in ("runs/reverse", "runs/from_script"):
        rows = [json.loads(line) for line in (home / run / "metrics.jsonl").read_text().splitlines()]
        steps = [r for r in rows if r.get("kind") == "train" and r.get("step") == 1]
        assert steps, f"{run}: no step-1 reward in metrics.jsonl: {rows}"
        assert 0.0 <= steps[0]["reward_mean"] <= 1.0
    assert "held-out reward before" in out

    # viewed: the step's rollouts are the environment's tasks, drawn from its train partition
    step_file = home / "runs/reverse/rollouts/step-0001.jsonl"
    episodes = [json.loads(line) for line in step_file.read_text().splitlines()]
    assert len(episodes) == 8  # 2 prompts x 4 rollouts
    ids = {e["task_id"] for e in episodes}
    assert all(i.startswith("reverse-") and int(i.split("-")[1]) % 2 == 0 for i in ids), ids
    page = (home / "step-0001.html").read_text()
    assert next(iter(ids)) in page

    # evaluated: the checkpoint on the environment's held-out (odd) tasks
    report = json.loads((home / "runs/reverse-eval/report.json").read_text())
    entry = report["entries"]["reverse"]
    scored = sorted(entry["task_scores"])
    assert len(scored) == 4 and all(int(i.split("-")[1]) % 2 == 1 for i in scored), scored
