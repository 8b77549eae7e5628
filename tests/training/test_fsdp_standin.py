"""FSDP2 on the two-rank device stand-in in its ``privateuse1`` form (tests/device_standin_fsdp.py): the
trainer's collectives and FSDP's own all-gathers and reduce-scatters must take tensors on the group's device, as
NCCL does. With the old ``all_reduce_sum`` (a CPU float64 tensor) this run stops at the first mini-batch with
NCCL's "No backend type associated with device type cpu"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolgym.training.outputs.logging import read_metrics

from .test_fsdp import _torchrun

pytestmark = pytest.mark.device_standin


def test_an_fsdp_run_on_the_two_rank_standin_passes_nccl_rules(tmp_path):
    rc, log = _torchrun(Path(__file__).parent / "fsdp_standin_worker.py", tmp_path, 29536,
                        # no CUDA even where a GPU exists: FSDP2 would take CUDA as the accelerator for its mesh
                        {"TOOLGYM_PARALLEL": "fsdp", "CUDA_VISIBLE_DEVICES": ""}, timeout=600)
    assert rc == 0, log[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r in ranks:
        assert r["fsdp"] and r["sharded"] == ["DTensor"]  # really FSDP2: every parameter a DTensor
        # the shards stayed on the stand-in device (FSDP did not treat them as CPU or deferred meta tensors)
        assert r["shard_devices"] == ["standin:0"] and r["shard_types"] == ["StandinTensor"]
        # FSDP's own collectives and the trainer's went through the NCCL check, and all passed it
        # (FSDP2 of torch 2.13 calls the *_single forms; older torch the *_tensor ones)
        got = r["checked"]
        assert got.get("all_gather_single", 0) + got.get("all_gather_into_tensor", 0) > 0, got
        assert got.get("reduce_scatter_single", 0) + got.get("reduce_scatter_tensor", 0) > 0, got
        assert got["all_reduce"] > 0, got
    train = read_metrics(tmp_path, "train")
    assert len(train) == 1 and train[0]["episodes"] == 8 and train[0]["optimizer_steps"] == 2
    assert (tmp_path / "checkpoints" / "step-000001").is_dir()  # the full state gathered from the shards
