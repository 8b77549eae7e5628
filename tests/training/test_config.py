"""Training config: YAML -> typed dataclasses, per-algorithm defaults, errors naming the field."""

from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from toolgym.errors import ConfigError, ToolgymError
from toolgym.training.algorithms import ALGORITHMS, register_algorithm
from toolgym.training.config import (
    TrainConfig,
    config_to_dict,
    dump_config,
    load_config,
)

MODEL = {"model": {"name_or_path": "smollm2-135m-instruct"}}

FULL_YAML = """
algorithm: ctpo
seed: 3
steps: 40
mini_batches: 4
grad_accum: 2
output_dir: runs/arith-ctpo
model:
  name_or_path: smollm2-135m-instruct
  dtype: bf16
  gradient_checkpointing: true
rollout:
  env: toolgym/Arith-v0
  env_kwargs: {max_operand: 99}
  group_size: 4
  prompts_per_step: 8
  max_turns: 3
  max_new_tokens: 128
  temperature: 1.0
  sampler: hf
loss:
  eps_high: 0.06
  mismatch_weight: true
  mismatch_cap: 3
advantage: {estimator: rloo}
optimizer:
  lr: 1e-5
  betas: [0.9, 0.95]
  warmup_steps: 5
  schedule: cosine
  grad_clip: null
eval: {every: 10, tasks: 50}
checkpoint: {every: 20}
logging: {tensorboard: true, log_every: 5}
sft: {enabled: true, demos: 200, epochs: 2, lr: 5e-5}
"""


def test_full_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(FULL_YAML)
    cfg = load_config(path)
    assert isinstance(cfg, TrainConfig)
    assert cfg.seed == 3 and cfg.steps == 40 and cfg.mini_batches == 4 and cfg.grad_accum == 2
    assert cfg.model.dtype == "bf16" and cfg.model.gradient_checkpointing is True
    assert cfg.rollout.env_kwargs == {"max_operand": 99} and cfg.rollout.group_size == 4
    # loss: algorithm defaults, with the file's keys on top
    assert (cfg.loss.ratio, cfg.loss.clip_mode, cfg.loss.eps_low, cfg.loss.eps_high, cfg.loss.power, cfg.loss.dual) == (
        "cumulative", "adaptive", 0.025, 0.06, 0.5, 0.05)
    assert cfg.loss.mismatch_weight is True and cfg.loss.mismatch_cap == 3.0
    assert cfg.advantage.estimator == "rloo"
    assert cfg.optimizer.lr == 1e-5 and cfg.optimizer.betas == (0.9, 0.95) and cfg.optimizer.grad_clip is None
    assert cfg.eval.every == 10 and cfg.checkpoint.every == 20 and cfg.logging.tensorboard and cfg.logging.log_every == 5
    assert cfg.sft.enabled and cfg.sft.demos == 200


@pytest.mark.parametrize(("algorithm", "expected"), [
    ("ctpo", ("cumulative", "adaptive", 0.025, 0.05, 0.5, 0.05, "token-mean")),
    ("grpo", ("token", "fixed", 0.2, 0.2, 0.0, 3.0, "token-mean")),
    ("gspo", ("gspo", "fixed", 3e-4, 4e-4, 0.0, None, "seq-mean-token-mean")),
    ("full_is", ("sequence", "adaptive", 0.2, 0.2, 0.0, math.log(3), "token-mean")),
])
def test_per_algorithm_loss_defaults(algorithm: str, expected: tuple) -> None:
    cfg = load_config({"algorithm": algorithm, **MODEL})
    got = (cfg.loss.ratio, cfg.loss.clip_mode, cfg.loss.eps_low, cfg.loss.eps_high, cfg.loss.power, cfg.loss.dual, cfg.loss.agg)
    assert got == expected


def test_defaults_follow_the_spec() -> None:
    cfg = load_config(MODEL)
    assert cfg.algorithm == "ctpo"
    assert cfg.rollout.group_size == 8 and cfg.rollout.prompts_per_step == 512 and cfg.mini_batches == 16
    assert cfg.rollout.max_turns == 5 and cfg.rollout.temperature == 1.0 and cfg.rollout.top_p == 1.0
    assert cfg.optimizer.lr == 1e-6 and cfg.optimizer.weight_decay == 0.01 and cfg.optimizer.grad_clip == 1.0
    assert cfg.optimizer.warmup_steps == 0 and cfg.optimizer.schedule == "constant"
    assert cfg.advantage.estimator == "grpo" and cfg.advantage.eps == 1e-6
    # null: on exactly with stale rollouts (rollout.max_staleness >= 1); off at the default 0
    assert cfg.loss.mismatch_weight is None and not cfg.mismatch_weight_on and cfg.loss.mismatch_cap == 5.0


def test_clip_config_bridge() -> None:
    from toolgym.training.policy_gradient.losses import ClipConfig

    assert ClipConfig.from_loss(load_config(MODEL).loss) == ClipConfig.ctpo()
    assert ClipConfig.from_loss(load_config({"algorithm": "grpo", **MODEL}).loss) == ClipConfig.grpo()
    assert ClipConfig.from_loss(load_config({"algorithm": "gspo", **MODEL}).loss) == ClipConfig.gspo()
    assert ClipConfig.from_loss(load_config({"loss": {"clip_mode": "none"}, **MODEL}).loss) is None


@pytest.mark.parametrize(("data", "message"), [
    ({"rollout": {"gruop_size": 4}}, r"^unknown rollout key 'gruop_size'; did you mean 'group_size'\? known: env, "),
    ({"learning_rate": 1e-5}, r"^unknown config key 'learning_rate'; known: algorithm, model, "),
    ({"algorithm": "ppo"}, r"^unknown algorithm 'ppo'; known: ctpo, grpo, gspo, full_is"),
    ({"loss": {"agg": "mean"}}, r"loss.agg: must be one of 'token-mean', 'seq-mean-token-mean', 'seq-mean-token-sum'; got 'mean'"),
    ({"loss": {"ratio": "prefix"}}, r"loss.ratio: must be one of 'cumulative', 'token', 'sequence', 'gspo'"),
    ({"loss": {"clip_mode": "log"}}, r"loss.clip_mode: must be one of 'adaptive', 'fixed', 'none'"),
    ({"loss": {"eps_low": -0.1}}, r"loss.eps_low: must be a finite number >= 0; got -0.1"),
    ({"algorithm": "grpo", "loss": {"dual": 0.5}}, r"loss.dual: must be null or a ratio > 1 with clip_mode 'fixed'"),
    ({"advantage": {"estimator": "ppo"}}, r"advantage.estimator: must be one of 'grpo', 'drgrpo', 'rloo'"),
    ({"optimizer": {"lr": "fast"}}, r"optimizer.lr: must be a number; got 'fast'"),
    ({"optimizer": {"betas": [0.9]}}, r"optimizer.betas: must be a list of 2 numbers"),
    ({"optimizer": {"schedule": "step"}}, r"optimizer.schedule: must be one of 'constant', 'linear', 'cosine'"),
    ({"rollout": {"group_size": 1}}, r"rollout.group_size: must be an integer >= 2"),
    ({"rollout": {"group_size": 2.5}}, r"rollout.group_size: must be an integer; got 2.5"),
    ({"rollout": {"sampler": "tgi"}}, r"^unknown sampler 'tgi'; known: hf, vllm, openai.* \(from rollout.sampler\)$"),
    ({"rollout": {"sampler": "openai"}}, r"rollout.base_url: must be a URL when sampler is 'openai'"),
    ({"rollout": {"top_p": 0}}, r"rollout.top_p: must be a number in \(0, 1\]"),
    ({"model": {"dtype": "fp16"}}, r"model.dtype: must be one of 'fp32', 'bf16'"),
    ({"model": {"gradient_checkpointing": "yes"}}, r"model.gradient_checkpointing: must be true or false"),
    ({"mini_batches": 7}, r"mini_batches: must be a divisor of rollout.prompts_per_step \(512\); got 7"),
    ({"grad_accum": 3}, r"grad_accum: must be a divisor of the 256 trajectories of one mini-batch"),
    ({"sft": {"enabled": True}}, r"sft.data: must be a JSONL path, or sft.demos > 0"),
    ({"rollout": [1, 2]}, r"rollout: must be a mapping of RolloutConfig fields"),
    ({"options": {"x": 1}}, r"options: algorithm 'ctpo' takes no options section"),
])
def test_invalid_configs_name_the_field(data: dict, message: str) -> None:
    merged = {**MODEL, **data} if "model" not in data else {**data, "model": {**MODEL["model"], **data["model"]}}
    with pytest.raises(ConfigError, match=message):
        load_config(merged)


def test_missing_model_and_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="model.name_or_path: must be a model asset name"):
        load_config({})
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_config(bad)
    bad.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        load_config(bad)
    assert issubclass(ConfigError, ToolgymError)


def test_overrides() -> None:
    cfg = load_config(MODEL, overrides=["loss.eps_high=0.1", "rollout.group_size=4", "algorithm=grpo", "logging.wandb=true"])
    assert cfg.algorithm == "grpo" and cfg.loss.eps_high == 0.1 and cfg.loss.ratio == "token"
    assert cfg.rollout.group_size == 4 and cfg.logging.wandb is True
    with pytest.raises(ConfigError, match="override 'loss.eps_high': must look like"):
        load_config(MODEL, overrides=["loss.eps_high"])
    with pytest.raises(ConfigError, match="unknown loss key 'eps'; did you mean 'eps_low'"):
        load_config(MODEL, overrides=["loss.eps=1"])


def test_round_trip_through_yaml(tmp_path: Path) -> None:
    src = tmp_path / "run.yaml"
    src.write_text(FULL_YAML)
    cfg = load_config(src)
    out = tmp_path / "resolved.yaml"
    dump_config(cfg, out)
    assert load_config(out) == cfg
    assert load_config(config_to_dict(cfg)) == cfg


@dataclass
class _DemoOptions:
    peers: int = 2
    mode: str = "positive"

    def _check(self, p: str) -> None:
        if self.peers < 1:
            raise ConfigError(f"{p}.peers: must be an integer >= 1; got {self.peers!r}")


def _no_objective(cfg):  # config-level tests never build the objective
    raise AssertionError("not called")


def test_registering_another_algorithm_with_options() -> None:
    register_algorithm("demo_distill", {"loss": {"ratio": "token", "clip_mode": "none", "agg": "seq-mean-token-mean"},
                                        "mini_batches": 1}, _DemoOptions, _no_objective)
    try:
        cfg = load_config({"algorithm": "demo_distill", "options": {"peers": 3}, **MODEL})
        assert cfg.options == _DemoOptions(peers=3) and cfg.loss.clip_mode == "none"
        assert load_config({"algorithm": "demo_distill", **MODEL}).options == _DemoOptions()
        with pytest.raises(ConfigError, match="unknown options key 'peer'; did you mean 'peers'"):
            load_config({"algorithm": "demo_distill", "options": {"peer": 3}, **MODEL})
        with pytest.raises(ConfigError, match="options.peers: must be an integer >= 1"):
            load_config({"algorithm": "demo_distill", "options": {"peers": 0}, **MODEL})
        assert load_config({"algorithm": "demo_distill", **MODEL}).mini_batches == 1  # its top-level default
        with pytest.raises(ValueError, match="unknown loss fields"):
            register_algorithm("broken", {"loss": {"epsilon": 0.1}}, None, _no_objective)
        with pytest.raises(ValueError, match="unknown config keys"):
            register_algorithm("broken", {"mini_batch": 2}, None, _no_objective)
        with pytest.raises(TypeError, match="must be a dataclass"):
            register_algorithm("broken", {}, dict, _no_objective)
        assert "broken" not in ALGORITHMS
    finally:
        ALGORITHMS.pop("demo_distill", None)


def test_config_import_is_torch_free() -> None:
    code = "import sys, toolgym.training.config as c; c.load_config({'model': {'name_or_path': 'm'}}); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_config_schema_is_a_leaf_of_training() -> None:
    """The schema imports no other module of toolgym.training (the algorithms, the losses and the trainer
    read it; loading and the algorithms' defaults live in toolgym.training.config on top)."""
    code = ("import sys, toolgym.training.config_schema as s; s.TrainConfig(); "
            "print(sorted(m for m in sys.modules if m.startswith('toolgym.training.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['toolgym.training.config_schema']"


def test_builtin_presets_are_the_registered_defaults() -> None:
    """Each algorithm's loss settings are written once (loss_presets): the registry, ClipConfig's
    classmethods and a loaded config agree."""
    from toolgym.training.policy_gradient.loss_presets import LOSS_PRESETS
    from toolgym.training.policy_gradient.losses import ClipConfig

    for name, preset in LOSS_PRESETS.items():
        assert ALGORITHMS[name].loss == preset
        loss = load_config({"algorithm": name, **MODEL}).loss
        assert {k: getattr(loss, k) for k in preset} == preset
    assert ClipConfig.grpo() == ClipConfig.from_loss(LOSS_PRESETS["grpo"])
    assert ClipConfig.gspo() == ClipConfig(mode="fixed", eps_low=3e-4, eps_high=4e-4, power=0.0, dual=None)
    assert ALGORITHMS["mopd"].loss == LOSS_PRESETS["ctpo"]


def test_lr_schedule_factor() -> None:
    cfg = load_config({**MODEL, "optimizer": {"warmup_steps": 4, "schedule": "cosine", "min_lr_ratio": 0.1}})
    f = [cfg.optimizer.lr_factor(s, 14) for s in range(16)]
    assert f[:4] == [0.25, 0.5, 0.75, 1.0]  # linear warmup
    assert f[4] == pytest.approx(1.0) and f[9] == pytest.approx(0.55) and f[14] == pytest.approx(0.1)
    assert f[15] == pytest.approx(0.1)  # stays at the floor past the end
    assert all(a >= b for a, b in zip(f[4:], f[5:], strict=False))
    lin = load_config({**MODEL, "optimizer": {"schedule": "linear"}}).optimizer
    assert [lin.lr_factor(s, 4) for s in range(5)] == [1.0, 0.75, 0.5, 0.25, 0.0]
    const = load_config(MODEL).optimizer
    assert {const.lr_factor(s, 10) for s in range(12)} == {1.0}


@pytest.mark.parametrize("path", sorted((Path(__file__).parents[2] / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_config_loads(path: Path) -> None:
    cfg = load_config(path)
    assert cfg.algorithm in ("ctpo", "grpo", "gspo", "full_is", "mopd", "sdpo", "opd")
    assert cfg.rollout.prompts_per_step % cfg.mini_batches == 0


def test_every_loss_name_the_config_accepts_runs_in_policy_loss() -> None:
    """config and losses share one list of ratio/agg/clip names: each accepted value trains."""
    import torch

    from toolgym.training import config as config_mod
    from toolgym.training.policy_gradient import losses

    assert config_mod.RATIOS == losses.RATIOS == ("cumulative", "token", "sequence", "gspo")
    assert config_mod.AGGS == losses.AGGS == ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")
    assert losses.CLIP_MODES == ("adaptive", "fixed") and config_mod.CLIP_MODES == ("adaptive", "fixed", "none")
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    old, mask, adv = torch.tensor([[-1.1, -1.9, -0.5]]), torch.ones(1, 3), torch.tensor([1.0])
    for ratio in config_mod.RATIOS:
        for agg in config_mod.AGGS:
            for mode in config_mod.CLIP_MODES:
                cfg = load_config({"model": {"name_or_path": "m"}, "loss": {
                    "ratio": ratio, "agg": agg, "clip_mode": mode, "dual": 3.0 if mode == "fixed" else 0.05}})
                loss, _ = losses.policy_loss(logp, old, adv, mask, ratio=cfg.loss.ratio, clip=losses.ClipConfig.from_loss(cfg.loss),
                                             agg=cfg.loss.agg)
                assert torch.isfinite(loss)


def test_diagnostics_every_is_gone() -> None:
    with pytest.raises(ConfigError, match="unknown logging key 'diagnostics_every'"):
        load_config({"model": {"name_or_path": "m"}, "logging": {"diagnostics_every": 5}})


def test_mismatch_weight_null_is_on_exactly_with_stale_rollouts() -> None:
    """loss.mismatch_weight: null follows rollout.max_staleness; true and false are honoured (docs/algorithms/ctpo.md,
    "Training on stale rollouts")."""
    def cfg(k: int, **loss):
        return load_config({**MODEL, "rollout": {"max_staleness": k}, "loss": loss})

    assert not cfg(0).mismatch_weight_on and cfg(1).mismatch_weight_on and cfg(3).mismatch_weight_on
    assert cfg(0, mismatch_weight=True).mismatch_weight_on and not cfg(2, mismatch_weight=False).mismatch_weight_on
    assert cfg(1).uncorrected_staleness() is None and cfg(0, mismatch_weight=False).uncorrected_staleness() is None
    line = cfg(2, mismatch_weight=False).uncorrected_staleness()
    assert line is not None and line.startswith("loss.mismatch_weight: false with rollout.max_staleness 2:")
    # the dumped config keeps null (its meaning follows max_staleness) and loads back equal
    c = cfg(2)
    assert config_to_dict(c)["loss"]["mismatch_weight"] is None and load_config(config_to_dict(c)) == c


def test_mopd_token_mismatch_weight_is_refused_where_the_sequence_weight_corrects() -> None:
    def cfg(k: int, loss: dict, token: bool):
        return load_config({**MODEL, "algorithm": "mopd", "rollout": {"max_staleness": k}, "loss": loss,
                            "options": {"token_mismatch_weight": token}})

    assert cfg(0, {}, True).options.token_mismatch_weight  # K = 0, sequence weight off: allowed as before
    with pytest.raises(ConfigError, match=r"^options\.token_mismatch_weight: must be false when loss\.mismatch_weight "
                                          r"is on \(null, with rollout\.max_staleness 2\)"):
        cfg(2, {}, True)
    with pytest.raises(ConfigError, match=r"^options\.token_mismatch_weight: must be false when loss\.mismatch_weight is on:"):
        cfg(0, {"mismatch_weight": True}, True)
    with pytest.raises(ConfigError, match=r"^options\.token_mismatch_weight: must be false with rollout\.max_staleness 1"):
        cfg(1, {"mismatch_weight": False}, True)
    assert cfg(2, {}, False).mismatch_weight_on


def test_stale_rollouts_need_a_sampler_with_log_probs() -> None:
    from toolgym.agents.samplers import SAMPLERS, register_sampler

    register_sampler("no_logprobs_test", "toolgym.agents.hf_sampler:HFSampler", in_process=True, logprobs=False)
    try:
        def cfg(k: int, **loss):
            return load_config({**MODEL, "rollout": {"sampler": "no_logprobs_test", "max_staleness": k}, "loss": loss})

        assert not cfg(0).mismatch_weight_on
        with pytest.raises(ConfigError, match=r"^loss\.mismatch_weight: must be false with sampler 'no_logprobs_test' "
                                              r"\(it returns no behaviour log-probs\) \(null turns it on with "
                                              r"rollout\.max_staleness 1\); got None$"):
            cfg(1)
        with pytest.raises(ConfigError, match=r"returns no behaviour log-probs\); got True$"):
            cfg(0, mismatch_weight=True)
        assert cfg(1, mismatch_weight=False).uncorrected_staleness() is not None
    finally:
        SAMPLERS.pop("no_logprobs_test", None)
