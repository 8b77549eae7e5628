"""The flat module paths of toolgym.training from before it was grouped into sub-packages still import, as the
moved modules themselves (documented paths such as ``toolgym.training.losses.policy_loss`` keep working)."""

from __future__ import annotations

import importlib
import pickle
import subprocess
import sys

import pytest

MOVED = {
    "losses": "policy_gradient.losses", "fused_loss": "policy_gradient.fused_loss",
    "loss_metrics": "policy_gradient.loss_metrics", "loss_presets": "policy_gradient.loss_presets",
    "advantages": "policy_gradient.advantages",
    "batch": "update.batch", "micro_batches": "update.micro_batches", "logprobs": "update.logprobs",
    "lm_head": "update.lm_head", "shared_prompt": "update.shared_prompt", "step_metrics": "update.step_metrics",
    "data_parallel": "update.data_parallel", "cuda_precision": "update.cuda_precision",
    "peak_memory": "update.peak_memory",
    "models": "model.load", "demo_model": "model.demo", "lora": "model.lora",
    "policy_sync": "sampling.policy_sync", "mixture": "sampling.mixture",
    "checkpoint_format": "sampling.checkpoint_format",
    "checkpoint": "outputs.checkpoint", "logging": "outputs.logging", "plot": "outputs.plot",
    "step_rollouts": "outputs.step_rollouts", "update_record": "outputs.update_record",
    "rollout_stats": "outputs.rollout_stats",
}


@pytest.mark.parametrize("old,new", sorted(MOVED.items()))
def test_an_old_flat_path_is_the_moved_module(old: str, new: str) -> None:
    moved = importlib.import_module(f"toolgym.training.{old}")
    assert moved is importlib.import_module(f"toolgym.training.{new}")
    assert moved.__spec__.name == f"toolgym.training.{new}"


def test_documented_names_import_from_the_old_paths_in_a_fresh_process() -> None:
    code = ("from toolgym.training.losses import ClipConfig, policy_loss, mismatch_weight\n"
            "from toolgym.training.advantages import group_advantages\n"
            "from toolgym.training.demo_model import build_demo\n"
            "from toolgym.training import data_parallel as D, fused_loss\n"
            "import toolgym.training.policy_gradient.losses as L\n"
            "assert policy_loss is L.policy_loss and D.__name__ == 'toolgym.training.update.data_parallel'\n"
            "assert fused_loss.__name__ == 'toolgym.training.policy_gradient.fused_loss'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_clip_config_pickles_under_its_new_module() -> None:
    from toolgym.training.losses import ClipConfig

    clip = ClipConfig.grpo()
    assert pickle.loads(pickle.dumps(clip)) == clip
    assert ClipConfig.__module__.startswith("toolgym.training.policy_gradient.")
