"""logging.save_rollouts: one real training step of the tiny demo model leaves its rollouts on disk, with the
advantage and clipped tokens of its update and the text of its tokens (for `toolgym rollouts view`)."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.signal_env import register_signal_arith
from tests.training.trainer_util import tiny_config
from toolgym.agents.storage import group_by, read_header, read_jsonl
from toolgym.agents.token_text import read_token_text
from toolgym.training.config import load_config
from toolgym.training.outputs.logging import read_metrics
from toolgym.training.outputs.step_rollouts import step_rollouts_path
from toolgym.training.policy_gradient.advantages import group_advantages
from toolgym.training.trainer import Trainer


def test_one_step_saves_its_rollouts(tmp_path):
    cfg = load_config(tiny_config(tmp_path / "run", steps=1, sft={"enabled": False}, checkpoint={"every": 0},
                                  logging={"progress": False, "plot": False, "save_rollouts": True}))
    Trainer(cfg, console=False).fit()
    out = Path(cfg.output_dir)
    path = out / "rollouts" / "step-0001.jsonl"
    assert sorted(p.name for p in (out / "rollouts").iterdir()) == [
        "step-0001.jsonl", "step-0001.jsonl.meta.json", "step-0001.jsonl.tokens.json"]
    trajs = read_jsonl(path)
    train = next(r for r in read_metrics(out) if r["kind"] == "train")
    assert len(trajs) == train["episodes"] == 4
    assert [len(g) for g in group_by(trajs)] == [2, 2]  # prompts_per_step x group_size
    assert all(len(t.response_ids) == len(t.behavior_logprobs) > 0 for t in trajs)
    meta = read_header(path)["meta"]
    assert meta["step"] == 1 and meta["algorithm"] == "ctpo" and meta["env_id"] == "toolgym/Arith-v0"
    # the text of every response token, as the run's tokenizer decodes it alone
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out / "demo-model")
    pieces = read_token_text(path)
    ids = {i for t in trajs for i in t.response_ids}
    assert set(pieces) == ids
    assert all(pieces[i] == tok.decode([i], skip_special_tokens=False) for i in ids)


def test_step_file_has_each_rows_advantage_and_clipped_tokens(tmp_path):
    """Rewards that differ in every group (tests/SignalArith-v0) give non-zero advantages; with two mini-batches
    and a large learning rate, the second mini-batch runs on moved weights and the clip cuts some of its
    tokens, while the first runs on the weights that sampled it (ratio 1: nothing to cut)."""
    cfg = tiny_config(tmp_path / "run", steps=1, sft={"enabled": False}, checkpoint={"every": 0},
                      optimizer={"lr": 5e-2}, logging={"progress": False, "plot": False, "save_rollouts": True})
    cfg["rollout"]["env"] = register_signal_arith()
    cfg = load_config(cfg)
    Trainer(cfg, console=False).fit()
    trajs = read_jsonl(step_rollouts_path(Path(cfg.output_dir), 1))
    groups = [t.group_id for t in trajs]
    expected, _ = group_advantages(torch.tensor([t.reward for t in trajs], dtype=torch.float64),
                                   [sorted(set(groups)).index(g) for g in groups], cfg.advantage.estimator,
                                   cfg.advantage.eps)
    info = [t.metadata["train"] for t in trajs]
    assert all(abs(x["advantage"]) > 0.5 for x in info)
    assert [x["advantage"] for x in info] == [float(torch.tensor(float(a)).float()) for a in expected]
    assert all(x["passes"] == cfg.update_epochs and x["trained"] for x in info)
    first = [x for t, x in zip(trajs, info, strict=True) if t.group_id == groups[0]]
    second = [x for t, x in zip(trajs, info, strict=True) if t.group_id != groups[0]]
    assert all(not any(x["clip"].values()) for x in first)
    assert any(any(x["clip"].values()) for x in second)
    for t, x in zip(trajs, info, strict=True):
        cut = [p for kind in ("high", "low", "dual") for p in x["clip"][kind]]
        assert all(t.loss_mask[p] == 1 for p in cut)  # only sampled tokens are ever clipped
        # the sign rule: A > 0 is cut above the window only; A < 0 below it or by the dual clip
        assert not x["clip"]["high"] if x["advantage"] < 0 else not (x["clip"]["low"] or x["clip"]["dual"])


def test_off_by_default_and_one_file_per_rank(tmp_path):
    assert load_config(tiny_config(tmp_path)).logging.save_rollouts is False
    assert step_rollouts_path(tmp_path, 12).name == "step-0012.jsonl"
    assert step_rollouts_path(tmp_path, 3, rank=1, world=2).name == "step-0003-rank1.jsonl"
