"""FSDP2 on 2 CPU gloo ranks (torchrun): checkpoints hold the full weights, equal to a single-process run's,
and an FSDP run resumes from them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from tests.training.tiny import tiny_lm
from toolgym.training.checkpoint import STATE_FILE, load_weights


def test_fsdp_checkpoint_is_the_full_model_of_a_single_process_run(tmp_path):
    torchrun = str(Path(sys.executable).parent / "torchrun")
    worker = Path(__file__).parent / "fsdp_worker.py"
    p = subprocess.run([torchrun, "--nproc_per_node", "2", "--master_port", "29533", str(worker), str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-3000:])
    res = json.loads((tmp_path / "result.json").read_text())
    assert res["sharded_type"] == "DTensor" and res["local_numel"] < res["full_numel"]  # really sharded

    ckpt = tmp_path / "checkpoints" / "step-000002"
    saved = load_weights(ckpt)
    model = tiny_lm().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randint(0, 64, (4, 6), generator=torch.Generator().manual_seed(7))
    for _ in range(2):
        opt.zero_grad()
        model(input_ids=x, labels=x).loss.backward()
        opt.step()
    ref = model.state_dict()
    assert set(saved) == set(ref)
    for k, v in ref.items():
        assert saved[k].shape == v.shape, k
        torch.testing.assert_close(saved[k], v, rtol=1e-4, atol=1e-5)
    blob = torch.load(ckpt / STATE_FILE, weights_only=True)
    assert blob["optimizer"]["state"]  # the full optimizer state, gathered on rank 0
    assert res["resume_max_diff"] < 1e-6
