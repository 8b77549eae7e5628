"""`distributed: ray` trains exactly like a single process: same seed, same per-step metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from toolgym.errors import ConfigError
from toolgym.training.config import load_config
from toolgym.training.outputs.logging import read_metrics
from toolgym.training.trainer import train

from ..training.trainer_util import tiny_config


def _cfg(tmp, name, model=None, **over):
    # SFT on half tool-using demonstrations: rollouts call the sandboxed Python tool, rewards vary
    cfg = tiny_config(tmp / name, steps=3, **over)
    cfg["model"]["model_kwargs"].update(hidden=64, heads=4, intermediate=128, max_positions=256, vocab_size=320)
    cfg["sft"].update(demos=400, epochs=3, lr=5e-3, batch_size=32, max_seq_len=128, tool_fraction=0.5,
                      direct_correct=0.3)
    cfg["rollout"].update(prompts_per_step=4, group_size=4, max_new_tokens=24, max_response_tokens=96, max_turns=3)
    cfg["rollout"]["env_kwargs"].update(max_turns=3, ops="+", format_weight=1.0)
    cfg["logging"]["save_rollouts"] = True  # a mismatch names the episode that differs
    # One row per forward pass and one thread in both runs, so every logit is computed in the same float
    # order: with the default batching (16 rows here, 4 per worker) and 2 threads against 1, the behaviour
    # log-probs differ by up to 2e-6 and, rarely, a sampled token flips (seen once in CI under load).
    # No prefix reuse either: a prompt prefilled on a kept cache rounds differently from a whole prefill (1e-7).
    cfg["rollout"]["sampler_kwargs"] = {"max_batch_size": 1, "prefix_cache_mb": 0}
    if model is not None:  # the warm-started model, shared by both runs
        cfg["model"] = {"name_or_path": str(model)}
        cfg["sft"]["enabled"] = False
    return cfg


def _warm_start(tmp) -> Path:
    """The SFT warm start once (what `toolgym sft` does), so the two runs below skip it."""
    from toolgym.agents.chat import ChatTemplate
    from toolgym.training import sft as S
    from toolgym.training.model.load import load_policy
    from toolgym.training.trainer import Trainer

    cfg = load_config(_cfg(tmp, "sft"))
    torch.manual_seed(cfg.seed)
    demos = Trainer(cfg, console=False)._demonstrations()
    model, tok = load_policy(cfg, tmp / "scratch", demos)
    trajs = S.demonstration_trajectories(ChatTemplate(tok), demos, cfg.sft.max_seq_len)
    S.sft_train(model, trajs, epochs=cfg.sft.epochs, lr=cfg.sft.lr, batch_size=cfg.sft.batch_size,
                pad_id=tok.pad_token_id or 0, seed=cfg.seed)
    out = tmp / "warm"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def _first_differing_episode(one: Path, other: Path, step: int) -> str | None:
    """The first episode of a step whose tokens, log-probs, text, tool output or reward differ between two runs."""
    from toolgym.agents.storage import read_jsonl
    from toolgym.training.outputs.step_rollouts import step_rollouts_path

    def episodes(out):
        return sorted(read_jsonl(step_rollouts_path(out, step)), key=lambda t: (t.task_id, t.metadata["episode_index"]))

    keys = ("task_id", "response_ids", "behavior_logprobs", "reward", "reward_breakdown", "turns", "finish_reason", "error")
    for x, y in zip(episodes(one), episodes(other), strict=True):
        if any(getattr(x, k) != getattr(y, k) for k in keys):
            return f"episode {x.task_id} differs:\n{x.to_json()[:3000]}\n---\n{y.to_json()[:3000]}"
    return None


@pytest.mark.slow
def test_ray_rollouts_match_single_process(tmp_path, ray_cluster, one_torch_thread):
    warm = _warm_start(tmp_path)
    single = train(load_config(_cfg(tmp_path, "single", warm)), console=False)
    dist = train(load_config(_cfg(tmp_path, "ray", warm, distributed="ray",
                                  ray={"num_workers": 2, "sandbox_pool": 1, "max_in_flight": 1})), console=False)
    assert single["steps"] == dist["steps"] == 3
    a = {r["step"]: r for r in read_metrics(tmp_path / "single", "train")}
    b = {r["step"]: r for r in read_metrics(tmp_path / "ray", "train")}
    assert sorted(a) == sorted(b) == [1, 2, 3]
    assert any(a[s]["tool_rate"] > 0 for s in a), "no tool calls: the sandbox path would be untested"
    assert any(a[s]["adv_zero_groups"] < 4 for s in a), "rewards never varied: the loss comparison would be vacuous"
    pool = json.loads((tmp_path / "ray" / "ray_pool.json").read_text())
    assert pool["stats"]["completed"] == 3 * 4 and pool["stats"]["duplicates_dropped"] == 0
    assert pool["version"] == 1 + 3  # pushed before the first rollout, then after every update
    assert [w["groups_done"] > 0 for w in pool["workers"]] == [True, True]
    assert all(w["version"] == pool["version"] for w in pool["workers"])
    for s in a:
        first = _first_differing_episode(tmp_path / "single", tmp_path / "ray", s)
        assert first is None, f"step {s}: {first}"
        for key in ("reward_mean", "response_tokens", "tool_rate", "answered", "loss", "grad_norm", "episodes"):
            assert a[s][key] == b[s][key], (s, key, a[s][key], b[s][key])


def test_config_refuses_ray_with_a_remote_sampler(tmp_path):
    cfg = _cfg(tmp_path, "bad", distributed="ray")
    cfg["rollout"].update(sampler="openai", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="rollout.sampler"):
        load_config(cfg)
    with pytest.raises(ConfigError, match="ray.num_workers"):
        load_config(_cfg(tmp_path, "bad2", distributed="ray", ray={"num_workers": 0}))


# the trainer's log-probs vs a Ray worker's (both transformers on CPU; the workers run the merged LoRA weights,
# the trainer the peft model: same values up to float rounding)
RAY_GAP_MAX = 1e-4


def _initial_policy_gap(warm: Path, run: Path, step: int, temperature: float) -> float:
    """Mean |initial policy's log-prob - behaviour log-prob| of a step's sampled tokens: what a missed push shows."""
    from transformers import AutoModelForCausalLM

    from toolgym.agents.storage import read_jsonl
    from toolgym.training.outputs.step_rollouts import step_rollouts_path
    from toolgym.training.update.batch import collate
    from toolgym.training.update.logprobs import response_logprobs

    model = AutoModelForCausalLM.from_pretrained(warm, dtype=torch.float32).eval()
    gaps = []
    for t in read_jsonl(step_rollouts_path(run, step)):
        with torch.no_grad():
            lp, _ = response_logprobs(model, collate([t]), temperature=temperature)
        mask = torch.tensor(t.loss_mask, dtype=torch.bool)
        gaps.append((lp[0, : len(t.response_ids)] - torch.tensor(t.behavior_logprobs))[mask].abs())
    return float(torch.cat(gaps).mean())


@pytest.mark.slow
def test_lora_with_ray_workers_samples_the_merged_policy(tmp_path, ray_cluster, one_torch_thread):
    # the workers rebuild a plain transformers model: they need the merged weights under its own names (peft's
    # names, base_layer / lora_A / lora_B, do not load), and after every update the new merged weights
    warm = _warm_start(tmp_path)
    cfg = _cfg(tmp_path, "lora", warm, distributed="ray", ray={"num_workers": 2, "sandbox_pool": 1, "max_in_flight": 1})
    cfg["model"]["lora"] = {"r": 8, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}
    cfg["optimizer"] = {"lr": 2e-2, "warmup_steps": 0}
    summary = train(load_config(cfg), console=False)
    assert summary["steps"] == 3
    rows = {r["step"]: r for r in read_metrics(tmp_path / "lora", "train")}
    assert sorted(rows) == [1, 2, 3]
    for s, row in rows.items():  # each step's rollouts came from the weights the trainer scores them with
        assert row["behaviour_gap_max"] < RAY_GAP_MAX, (s, row["behaviour_gap_max"])
    assert any(rows[s]["adv_zero_groups"] < 4 for s in (1, 2)), "no update had signal: a missed push could not show"
    pool = json.loads((tmp_path / "lora" / "ray_pool.json").read_text())
    assert pool["version"] == 1 + 3 and all(w["version"] == pool["version"] for w in pool["workers"])
    # the adapters moved the policy far beyond the gap bound: step 3 sampled on the initial weights would show
    moved = _initial_policy_gap(warm, tmp_path / "lora", 3, float(cfg["rollout"]["temperature"]))
    assert moved > 100 * RAY_GAP_MAX, moved
