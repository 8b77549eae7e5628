"""DDP on the two-rank device stand-in (tests/device_standin_ranks.py): the trainer's collectives must take
tensors on the group's device, as NCCL does. Before the fix, ``all_reduce_sum`` handed a CPU float64 tensor to
``all_reduce`` and this run stopped at the first mini-batch with NCCL's "No backend type associated with device
type cpu", the error a multi-GPU run raised."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from toolgym.training.logging import read_metrics

pytestmark = pytest.mark.device_standin


def test_a_ddp_run_on_the_two_rank_standin_passes_nccl_rules(tmp_path):
    torchrun = str(Path(sys.executable).parent / "torchrun")
    worker = Path(__file__).parent / "ddp_standin_worker.py"
    p = subprocess.run([torchrun, "--nproc_per_node", "2", "--master_port", "29535", str(worker), str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-3000:])
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["digest"] == ranks[1]["digest"]  # DDP kept the ranks' weights identical
    assert [r["devices"] for r in ranks] == [["meta"], ["meta"]] and ranks[0]["ddp"] == "DistributedDataParallel"
    train = read_metrics(tmp_path, "train")
    assert len(train) == 1 and train[0]["episodes"] == 8 and train[0]["optimizer_steps"] == 2
