"""DDP on the two-rank device stand-in (tests/device_standin_ranks.py): the trainer's collectives must take
tensors on the group's device, as NCCL does. Before the fix, ``all_reduce_sum`` handed a CPU float64 tensor to
``all_reduce`` and this run stopped at the first mini-batch with NCCL's "No backend type associated with device
type cpu", the error a multi-GPU run raised."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolgym.training.outputs.logging import read_metrics

from .test_fsdp import _torchrun

pytestmark = pytest.mark.device_standin


def test_a_ddp_run_on_the_two_rank_standin_passes_nccl_rules(tmp_path):
    rc, log = _torchrun(Path(__file__).parent / "ddp_standin_worker.py", tmp_path, 29535, {}, timeout=600)
    assert rc == 0, log[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["digest"] == ranks[1]["digest"]  # DDP kept the ranks' weights identical
    assert [r["devices"] for r in ranks] == [["meta"], ["meta"]] and ranks[0]["ddp"] == "DistributedDataParallel"
    train = read_metrics(tmp_path, "train")
    assert len(train) == 1 and train[0]["episodes"] == 8 and train[0]["optimizer_steps"] == 2
