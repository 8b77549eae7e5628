"""Run under torchrun (2 ranks, TOOLGYM_PARALLEL=fsdp): an FSDP2 training run (SFT warm start, one step with
rollouts, a checkpoint) on the stand-in's ``privateuse1`` form, whose collectives refuse what NCCL refuses; each
rank then writes where its parameter shards live and which collectives passed the check."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.device_standin_fsdp import install  # noqa: E402

install()  # before anything touches a device: the stand-in is now the "standin" device FSDP2 accepts
from tests.device_standin import standin_mode  # noqa: E402
from tests.device_standin_ranks import CHECKED, init_ranks, nccl_rules  # noqa: E402
from tests.training.trainer_util import two_rank_config  # noqa: E402
from toolgym.training.config import load_config  # noqa: E402
from toolgym.training.trainer import Trainer  # noqa: E402
from toolgym.training.update import data_parallel as D  # noqa: E402

out = Path(sys.argv[1])
info = init_ranks()
with standin_mode(), nccl_rules():
    tr = Trainer(load_config(two_rank_config(out)), console=False)
    tr.fit()
    shards = [p.to_local() for p in tr.module.parameters()]
    (out / f"rank{info.rank}.json").write_text(json.dumps({
        "sharded": sorted({type(p).__name__ for p in tr.module.parameters()}),
        "shard_devices": sorted({str(s.device) for s in shards}),
        "shard_types": sorted({type(s).__name__ for s in shards}),
        "fsdp": D.is_fsdp(tr.module), "checked": dict(CHECKED)}))
D.shutdown(info)
print(f"rank {info.rank} done", flush=True)
