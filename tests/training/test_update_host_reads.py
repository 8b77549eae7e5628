"""The update's inner loop makes the host wait for the device at most once per optimizer step (the grad-norm
read that decides whether the step is taken), plus one read of the update's metrics at the end.

Each host read of a device value (``.item()``, ``bool()``, ``.tolist()``, ``.cpu()``, ``nonzero``, boolean
indexing) stalls a GPU's queue until every kernel before it has run; per micro-batch they leave the GPU idle
between forward and backward. Counted on the device stand-in by its host-read instrument
(tests/device_standin.py :func:`count_host_reads`), which records each such op on a device tensor and the code
that asked. Before this was fixed, a CTPO update of 4 micro-batches and 2 optimizer steps read the device 27
times (lengths and ids ``.cpu().tolist()``, ``bool(isfinite(...))`` twice between forward and backward,
``nonzero()`` in the head's backward). Counted: toolgym's reads. Not counted: transformers' SDPA mask builder
reads the padding mask once per forward (``padding_mask.all()``), a library's own choice."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.device_standin import count_host_reads
from toolgym.training.config import load_config
from toolgym.training.trainer import Trainer
from toolgym.training.update import data_parallel as D

from .test_mopd_trainer import _groups
from .trainer_util import tiny_config

pytestmark = pytest.mark.device_standin

MOPD = {"algorithm": "mopd", "options": {"k": 20, "max_teacher_tokens": 512}}
CASES = {
    "ctpo": {"mini_batches": 2, "grad_accum": 2},
    "ctpo-per-row": {"mini_batches": 2, "grad_accum": 2, "model__share_prompt": "off"},
    "grpo": {"algorithm": "grpo", "mini_batches": 2, "grad_accum": 2},
    "mopd": {**MOPD, "grad_accum": 2},
}


def _ready(tmp_path: Path, device: str, monkeypatch: pytest.MonkeyPatch, over: dict) -> tuple[Trainer, object, object]:
    data = tiny_config(tmp_path, **{"sft__enabled": False, **over})
    if data["algorithm"] != "ctpo" and "mini_batches" not in over:
        data.pop("mini_batches")
    monkeypatch.setattr(D, "init", lambda spec=None: D.DistInfo(device=device))
    tr = Trainer(load_config(data), console=False)
    tr.build()
    obj = tr.objective = tr.algorithm.objective(tr.cfg)
    rewards = [[1.0, 0.0, 0.5, 0.25], [0.0, 1.0, 0.75, 0.5]]
    batch, _ = obj.prepare(tr.ctx, _groups(tr, rewards))
    return tr, obj, batch


@pytest.mark.parametrize("case", list(CASES))
def test_an_update_reads_the_device_once_per_optimizer_step(tmp_path, device, monkeypatch, case) -> None:
    if device == "cuda":
        pytest.skip("counted on the stand-in; scripts/gpu_check runs the update under torch.cuda.set_sync_debug_mode")
    tr, obj, batch = _ready(tmp_path, device, monkeypatch, CASES[case])
    tr.update(batch, obj)  # warm: once-per-model checks (prompt sharing, the chunked head) read the device
    with count_host_reads() as reads:
        out = tr.update(batch, obj)
    steps = out["optimizer_steps"]
    ours = [r for r in reads if " at toolgym/" in r]
    assert steps >= 1 and ours, "the instrument saw the update's reads (the grad norm, the metrics)"
    assert len(ours) <= steps + 1, Counter(ours).most_common()
