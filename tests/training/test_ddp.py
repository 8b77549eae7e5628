"""The trainer under `torchrun --nproc_per_node 2` on CPU (gloo): both ranks finish with identical weights."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from toolgym.training.outputs.logging import read_metrics

pytestmark = pytest.mark.slow  # measured over 1 s each (the fast tier leaves them out)


def test_two_process_ddp_step_keeps_ranks_identical(tmp_path):
    torchrun = str(Path(sys.executable).parent / "torchrun")
    worker = Path(__file__).parent / "ddp_worker.py"
    out = tmp_path / "ddp"
    p = subprocess.run([torchrun, "--nproc_per_node", "2", "--master_port", "29531", str(worker), str(out)],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-3000:])
    d0 = (out / "rank0.digest").read_text()
    d1 = (out / "rank1.digest").read_text()
    assert d0 == d1
    train = read_metrics(out, "train")
    assert len(train) == 1
    assert train[0]["episodes"] == 8  # 4 prompts x 2 rollouts, half sampled on each rank
    assert train[0]["optimizer_steps"] == 2
