"""Run under torchrun (2 CPU gloo ranks): FSDP2 training steps on a tiny Llama, then the trainer's checkpoint
path (full state dict gathered to rank 0) and an FSDP resume from that checkpoint."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.training.tiny import tiny_lm  # noqa: E402
from toolgym.training.outputs.checkpoint import TrainerState, latest_checkpoint, load_checkpoint  # noqa: E402
from toolgym.training.trainer import Trainer  # noqa: E402
from toolgym.training.update import data_parallel as D  # noqa: E402

out = Path(sys.argv[1])
info = D.init("cpu")
BATCH = torch.randint(0, 64, (4, 6), generator=torch.Generator().manual_seed(7))


def build() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = tiny_lm().train()
    D.wrap_model(model, info, "fsdp")
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def step(model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
    x = BATCH[info.rank * 2 : (info.rank + 1) * 2]  # each rank its half; FSDP averages the gradients
    opt.zero_grad()
    model(input_ids=x, labels=x).loss.backward()
    opt.step()


model, opt = build()
assert D.is_fsdp(model)
sharded = next(iter(model.state_dict().values()))
for _ in range(2):
    step(model, opt)
tr = Trainer.__new__(Trainer)  # the trainer's own _save, without rollouts
tr.dist, tr.out, tr.module, tr.optimizer, tr.scheduler, tr.tokenizer, tr.objective = (
    info, out, model, opt, None, None, None)
tr.cfg = SimpleNamespace(checkpoint=SimpleNamespace(keep_last=3))
tr._save(TrainerState(step=2, data_cursor=4))
ckpt = latest_checkpoint(out / "checkpoints")

step(model, opt)  # the uninterrupted run's third step
cont = D.full_state_dict(model, rank0_only=False)

fresh, fresh_opt = build()
load_checkpoint(ckpt, fresh, fresh_opt, None, restore_rng=False,
                set_model=lambda sd: D.load_full_state_dict(fresh, sd),
                set_optimizer=lambda osd: D.load_full_state_dict(fresh, {}, fresh_opt, osd))
step(fresh, fresh_opt)  # the resumed run's third step
res = D.full_state_dict(fresh, rank0_only=False)
diff = max((cont[k] - res[k]).abs().max().item() for k in cont)
if info.main:
    (out / "result.json").write_text(json.dumps({
        "sharded_type": type(sharded).__name__, "local_numel": sharded.to_local().numel(),
        "full_numel": sharded.numel(), "resume_max_diff": diff}))
D.shutdown(info)
print(f"rank {info.rank} done", flush=True)
