"""Run under torchrun: one tiny training run, then each rank writes a digest of its weights."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from toolgym.training.config import load_config
from toolgym.training.trainer import Trainer

sys.path.insert(0, str(Path(__file__).parent))
from trainer_util import tiny_config  # noqa: E402

out = Path(sys.argv[1])
cfg = tiny_config(out, steps=1, sft={"enabled": True, "demos": 32, "epochs": 4, "lr": 3e-3, "batch_size": 8,
                                     "max_seq_len": 64, "tool_fraction": 0.0, "direct_correct": 0.5})
cfg["rollout"]["prompts_per_step"] = 4
cfg["rollout"]["env_kwargs"]["ops"] = "+"
tr = Trainer(load_config(cfg), console=False)
tr.fit()
h = hashlib.sha256()
for k, v in sorted(tr.module.state_dict().items()):
    h.update(k.encode())
    h.update(v.detach().float().contiguous().numpy().tobytes())
rank = tr.dist.rank
(out / f"rank{rank}.digest").write_text(h.hexdigest())
print(f"rank {rank} done", flush=True)
