"""logging.save_rollouts: one real training step of the tiny demo model leaves its rollouts on disk."""

from __future__ import annotations

from pathlib import Path

from toolgym.agents.storage import group_by, read_header, read_jsonl
from toolgym.training.config import load_config
from toolgym.training.logging import read_metrics
from toolgym.training.step_rollouts import step_rollouts_path
from toolgym.training.trainer import Trainer

from .trainer_util import tiny_config


def test_one_step_saves_its_rollouts(tmp_path):
    cfg = load_config(tiny_config(tmp_path / "run", steps=1, sft={"enabled": False}, checkpoint={"every": 0},
                                  logging={"progress": False, "plot": False, "save_rollouts": True}))
    Trainer(cfg, console=False).fit()
    out = Path(cfg.output_dir)
    path = out / "rollouts" / "step-0001.jsonl"
    assert sorted(p.name for p in (out / "rollouts").iterdir()) == ["step-0001.jsonl", "step-0001.jsonl.meta.json"]
    trajs = read_jsonl(path)
    train = next(r for r in read_metrics(out) if r["kind"] == "train")
    assert len(trajs) == train["episodes"] == 4
    assert [len(g) for g in group_by(trajs)] == [2, 2]  # prompts_per_step x group_size
    assert all(len(t.response_ids) == len(t.behavior_logprobs) > 0 for t in trajs)
    meta = read_header(path)["meta"]
    assert meta["step"] == 1 and meta["algorithm"] == "ctpo" and meta["env_id"] == "toolgym/Arith-v0"


def test_off_by_default_and_one_file_per_rank(tmp_path):
    assert load_config(tiny_config(tmp_path)).logging.save_rollouts is False
    assert step_rollouts_path(tmp_path, 12).name == "step-0012.jsonl"
    assert step_rollouts_path(tmp_path, 3, rank=1, world=2).name == "step-0003-rank1.jsonl"
