"""Trainer: one real step end to end, the update on hand-made rollout batches, bad input, the CLI."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from toolgym.agents.trajectory import Trajectory
from toolgym.training.config import load_config
from toolgym.training.outputs.logging import read_metrics
from toolgym.training.trainer import Trainer, trajectory_stats

from .trainer_util import tiny_config

TOOLGYM = str(Path(sys.executable).parent / "toolgym")


def _ready_trainer(tmp_path: Path, **over) -> Trainer:
    cfg = load_config(tiny_config(tmp_path / "run", **{"sft__enabled": False, **over}))
    tr = Trainer(cfg, console=False)
    tr.build()
    return tr


def _groups(tr: Trainer, rewards: list[list[float]], n_resp: int = 6) -> list[list[Trajectory]]:
    """Hand-made trajectories: fixed prompt, random response tokens, the given rewards; a tool span masked out."""
    g = torch.Generator().manual_seed(0)
    vocab = tr.module.config.vocab_size
    out = []
    for gi, group in enumerate(rewards):
        prompt = tr.template.prompt_ids([{"role": "user", "content": f"What is {gi} + 1?"}])
        row = []
        for r in group:
            resp = torch.randint(3, vocab, (n_resp,), generator=g).tolist()
            mask = [1, 1, 0, 0, 1, 1]  # tokens 2-3 stand for tool output
            row.append(Trajectory(task_id=f"t{gi}", group_id=f"g{gi}", prompt_ids=prompt, response_ids=resp,
                                  loss_mask=mask, behavior_logprobs=[0.0] * n_resp, reward=r))
        out.append(row)
    return out


def test_update_changes_weights_and_first_minibatch_is_on_policy(tmp_path):
    tr = _ready_trainer(tmp_path)
    obj = tr.algorithm.objective(tr.cfg)
    before = {k: v.clone() for k, v in tr.module.state_dict().items()}
    batch, prep = obj.prepare(tr.ctx, _groups(tr, [[1.0, 0.0], [0.0, 1.0]]))
    assert prep["adv_zero_groups"] == 0
    # the first mini-batch runs on the weights that produced old_logp: every ratio is exactly 1
    loss, m = obj.loss(tr.ctx, batch, [0, 1], 8.0, 2.0)
    assert m["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert m["tokens"] == 8  # tool tokens are not policy tokens
    out = tr.update(batch, obj)
    assert out["optimizer_steps"] == tr.cfg.mini_batches
    assert math.isfinite(out["loss"])
    changed = [k for k, v in tr.module.state_dict().items() if not torch.equal(v, before[k])]
    assert changed, "an update with non-zero advantages must move the weights"
    # after the first optimizer step, the second mini-batch is off-policy
    loss2, m2 = obj.loss(tr.ctx, batch, [2, 3], 8.0, 2.0)
    assert m2["ratio_mean"] != pytest.approx(1.0, abs=1e-7)


def test_all_equal_rewards_do_not_move_weights(tmp_path):
    tr = _ready_trainer(tmp_path)
    obj = tr.algorithm.objective(tr.cfg)
    before = {k: v.clone() for k, v in tr.module.state_dict().items()}
    batch, prep = obj.prepare(tr.ctx, _groups(tr, [[1.0, 1.0], [0.0, 0.0]]))
    assert prep["adv_zero_groups"] == 2
    tr.optimizer.param_groups[0]["weight_decay"] = 0.0
    tr.update(batch, obj)
    assert all(torch.equal(v, before[k]) for k, v in tr.module.state_dict().items())


def test_nonfinite_rewards_and_logprobs_are_skipped_and_counted(tmp_path):
    tr = _ready_trainer(tmp_path)
    obj = tr.algorithm.objective(tr.cfg)
    batch, prep = obj.prepare(tr.ctx, _groups(tr, [[1.0, float("nan"), 0.0, 1.0], [0.0, 1.0, 1.0, 0.0]]))
    assert prep["reward_nonfinite"] == 1
    assert prep["rows_skipped_prepare"] == 1
    assert not bool(batch.keep[1])
    # fault injection (a mock of a numerical blow-up we cannot cause on demand): NaN in one row's old log-probs
    batch.old_logp[4] = batch.old_logp[4].clone()
    batch.old_logp[4][0] = float("nan")
    out = tr.update(batch, obj)
    assert math.isfinite(out["loss"]) and math.isfinite(out["grad_norm"])
    assert all(torch.isfinite(p).all() for p in tr.module.parameters())


def test_trajectory_stats_counts_tool_use():
    a = Trajectory(task_id="a", group_id="g", prompt_ids=[1], reward=1.0,
                   turns=[{"role": "user"}, {"role": "assistant"}, {"role": "tool"}, {"role": "assistant"}],
                   finish_reason="answer")
    b = Trajectory(task_id="b", group_id="g", prompt_ids=[1], reward=0.0,
                   turns=[{"role": "user"}, {"role": "assistant"}], finish_reason="answer")
    s = trajectory_stats([a, b])
    assert s["tool_rate"] == 0.5 and s["reward_mean"] == 0.5 and s["answered"] == 1.0
    assert s["infra_failures"] == 0
    late = Trajectory(task_id="c", group_id="g", prompt_ids=[1], finish_reason="timeout", error="wall-time")
    crashed = Trajectory(task_id="d", group_id="g", prompt_ids=[1], finish_reason="error", error="boom")
    s = trajectory_stats([a, late, crashed])
    assert s["infra_failures"] == 2 and s["errors"] == 1 and s["reward_mean"] == 1 / 3  # scored 0, and counted


def test_one_real_training_run_writes_metrics_checkpoints_and_plot(tmp_path):
    cfg = load_config(tiny_config(tmp_path / "run", steps=1, eval={"every": 1, "tasks": 2, "at_start": True},
                                  logging={"progress": False, "plot": True, "tensorboard": True}))
    summary = Trainer(cfg, console=False).fit()
    out = Path(cfg.output_dir)
    recs = read_metrics(out)
    kinds = [r["kind"] for r in recs]
    assert kinds.count("train") == 1 and kinds.count("eval") == 2 and "sft" in kinds
    train = next(r for r in recs if r["kind"] == "train")
    assert train["episodes"] == 4 and train["optimizer_steps"] == 2 and train["errors"] == 0
    assert math.isfinite(train["loss"]) and 0.0 <= train["reward_mean"] <= 1.0
    assert (out / "checkpoints" / "latest").exists()
    assert (out / "curves.png").stat().st_size > 1000
    assert list((out / "tb").iterdir())
    assert summary["before"]["step"] == 0 and summary["after"]["step"] == 1
    assert all(r["infra_failures"] == 0 and r["episodes"] == 2 for r in recs if r["kind"] == "eval")


def test_invalid_config_is_one_line_naming_the_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("algorithm: ctpo\nmodel: {name_or_path: demo}\nrollout: {prompts_per_step: 8}\nmini_batches: 3\n")
    p = subprocess.run([TOOLGYM, "train", str(bad)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: mini_batches")
    bad.write_text("algorithm: ppo\n")
    p = subprocess.run([TOOLGYM, "train", str(bad)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.startswith("error: unknown algorithm 'ppo'; known: ctpo, ")


def test_unknown_model_is_a_config_error(tmp_path):
    cfg = load_config(tiny_config(tmp_path / "run", model={"name_or_path": str(tmp_path / "nope")}))
    from toolgym.errors import ConfigError

    with pytest.raises(ConfigError, match="model.name_or_path"):
        Trainer(cfg, console=False).fit()


def test_rollout_tool_parser_is_the_format_the_trainers_rollouts_parse(tmp_path):
    """`rollout.tool_parser` names the model's format for training rollouts; unset, the template decides;
    an unknown name is one line listing the formats."""
    from toolgym.errors import ConfigError

    tr = _ready_trainer(tmp_path / "a", rollout__tool_parser="llama3_json")
    assert (tr.template.tool_parser.name, tr.template.tool_parser_source) == ("llama3_json", "override")
    assert _ready_trainer(tmp_path / "b").template.tool_parser_source in ("template", "default")
    with pytest.raises(ConfigError, match=r"rollout.tool_parser: must be null or one of hermes, llama3_json") as err:
        load_config(tiny_config(tmp_path / "c", rollout__tool_parser="xml"))
    assert "\n" not in str(err.value)
