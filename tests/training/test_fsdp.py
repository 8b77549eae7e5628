"""FSDP2 on 2 CPU gloo ranks (torchrun): checkpoints hold the full weights, equal to a single-process run's,
an FSDP run resumes from them, and a whole training step with the shared-module `hf` sampler completes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.training.tiny import tiny_lm
from toolgym.training.outputs.checkpoint import STATE_FILE, load_weights
from toolgym.training.outputs.logging import read_metrics

pytestmark = pytest.mark.slow  # measured over 1 s each (the fast tier leaves them out)


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


def _torchrun(worker: Path, out: Path, port: int, env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Run ``worker`` on 2 ranks; on a timeout kill the whole process group (a hung rank would outlive torchrun)."""
    import os
    import signal

    torchrun = str(Path(sys.executable).parent / "torchrun")
    p = subprocess.Popen([torchrun, "--nproc_per_node", "2", "--master_port", str(port), str(worker), str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                         env={**os.environ, **env})
    try:
        log, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        log, _ = p.communicate()
        return -1, f"timed out after {timeout} s (a rank waited on a collective the other never issued)\n{log}"
    return p.returncode, log


@pytest.mark.slow
def test_fsdp_training_step_with_the_hf_sampler_decodes_without_hanging(tmp_path):
    # the ranks decode different numbers of forwards (asserted below); a sharded forward all-gathers every layer,
    # so without the full weights gathered once per decode the longer rank's all-gathers meet the other rank's
    # next collective: gloo aborts ("Is there a distributed collective mismatch"), NCCL waits forever
    rc, log = _torchrun(Path(__file__).parent / "fsdp_rollout_worker.py", tmp_path, 29534,
                        {"TOOLGYM_PARALLEL": "fsdp"}, timeout=300)
    assert rc == 0, log[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["sharded"] for r in ranks] == ["DTensor", "DTensor"]  # really FSDP, and sharded again after decoding
    assert ranks[0]["decode_forwards"] != ranks[1]["decode_forwards"], ranks  # the case that used to hang
    train = read_metrics(tmp_path, "train")
    assert len(train) == 1 and train[0]["episodes"] == 8 and train[0]["optimizer_steps"] == 2
    # the rollouts were sampled from the trainer's policy: the gathered weights are the sharded ones
    assert train[0]["behaviour_gap_max"] < 1e-4
    assert [r["step"] for r in read_metrics(tmp_path, "eval")] == [0, 1]
