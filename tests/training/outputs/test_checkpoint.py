import random

import numpy as np
import torch

from tests.training.tiny import tiny_lm
from toolgym.training.outputs.checkpoint import (
    TrainerState,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)


def _step(model, opt):
    x = torch.randint(0, 64, (2, 5))
    loss = model(input_ids=x, labels=x).loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def test_resume_reproduces_the_next_step_exactly(tmp_path):
    torch.manual_seed(1)
    model = tiny_lm()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    _step(model, opt)
    save_checkpoint(tmp_path, model, opt, None, TrainerState(step=1, data_cursor=7))
    expected = (_step(model, opt), random.random(), float(np.random.rand()))

    fresh = tiny_lm(seed=123)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    random.seed(999)
    state = load_checkpoint(latest_checkpoint(tmp_path), fresh, fresh_opt)
    assert (state.step, state.data_cursor) == (1, 7)
    got = (_step(fresh, fresh_opt), random.random(), float(np.random.rand()))
    assert got == expected


def test_half_written_checkpoint_is_ignored(tmp_path):
    model = tiny_lm()
    opt = torch.optim.AdamW(model.parameters())
    save_checkpoint(tmp_path, model, opt, None, TrainerState(step=3))
    (tmp_path / ".tmp-step-000004-1").mkdir()  # what a kill -9 during a save leaves
    (tmp_path / "step-000005").mkdir()  # a folder without its state file
    assert latest_checkpoint(tmp_path).name == "step-000003"
