"""Run under torchrun (2 ranks): a DDP training run (SFT warm start, one step with rollouts) on the two-rank
device stand-in, whose collectives refuse what NCCL refuses; each rank then writes a digest of its weights and
the device its parameters ended on."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.device_standin import standin_mode  # noqa: E402
from tests.device_standin_ranks import init_ranks, nccl_rules  # noqa: E402
from tests.training.trainer_util import two_rank_config  # noqa: E402
from toolgym.training.config import load_config  # noqa: E402
from toolgym.training.trainer import Trainer  # noqa: E402
from toolgym.training.update import data_parallel as D  # noqa: E402

out = Path(sys.argv[1])
info = init_ranks()
with standin_mode(), nccl_rules():
    tr = Trainer(load_config(two_rank_config(out)), console=False)
    tr.fit()
    h = hashlib.sha256()
    for k, v in sorted(tr.module.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().cpu().float().contiguous().numpy().tobytes())
    devices = sorted({p.device.type for p in tr.module.parameters()})
(out / f"rank{info.rank}.json").write_text(json.dumps({"digest": h.hexdigest(), "devices": devices,
                                                       "ddp": type(tr.model).__name__}))
D.shutdown(info)
print(f"rank {info.rank} done", flush=True)
