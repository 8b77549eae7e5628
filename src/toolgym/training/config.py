"""Typed configuration of a training run, loaded from YAML (or a dict).

``load_config(path_or_dict) -> TrainConfig``. Every section is a dataclass; unknown keys and
invalid values raise :class:`toolgym.errors.ConfigError` naming the dotted field and what is
allowed. The ``loss`` section's defaults depend on ``algorithm`` (docs/algorithms/);
keys given in the file override them. Torch-free, so ``toolgym train --help`` and config
checks stay fast.

Algorithms live in the registry of :mod:`toolgym.training.algorithms` (``register_algorithm``): their
loss and top-level defaults, the dataclass of their ``options:`` section, and their objective.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

from toolgym.errors import ConfigError

# ---------------------------------------------------------------- sections


@dataclass
class LossConfig:
    """Importance ratio, clip and aggregation (defaults come from the algorithm)."""

    ratio: Literal["cumulative", "token", "sequence", "gspo"] = "cumulative"
    clip_mode: Literal["adaptive", "fixed", "none"] = "adaptive"
    eps_low: float = 0.025  # adaptive: log space, times t^power; fixed: ratio window [1-eps_low, 1+eps_high]
    eps_high: float = 0.05
    power: float = 0.5
    dual: float | None = 0.05  # adaptive: log-space base; fixed: a ratio > 1; null: no dual clip
    agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean"
    mismatch_weight: bool = False  # rollout-vs-trainer weight, per sequence, truncated (docs/algorithms/ctpo.md)
    mismatch_cap: float = 5.0

    def clip_config(self) -> Any:
        """The ``ClipConfig`` for ``policy_loss`` (None when ``clip_mode`` is ``none``)."""
        from toolgym.training.losses import ClipConfig

        if self.clip_mode == "none":
            return None
        power = self.power if self.clip_mode == "adaptive" else 0.0
        return ClipConfig(mode=self.clip_mode, eps_low=self.eps_low, eps_high=self.eps_high, power=power, dual=self.dual)

    def _check(self, p: str) -> None:
        for name in ("eps_low", "eps_high", "power"):
            _require(getattr(self, name) >= 0, f"{p}.{name}", "a number >= 0", getattr(self, name))
        if self.clip_mode == "fixed":
            _require(self.eps_low <= 1, f"{p}.eps_low", "a number in [0, 1] with clip_mode 'fixed'", self.eps_low)
            _require(self.dual is None or self.dual > 1, f"{p}.dual", "null or a ratio > 1 with clip_mode 'fixed'", self.dual)
        elif self.clip_mode == "adaptive":
            _require(self.dual is None or self.dual > 0, f"{p}.dual", "null or a number > 0 with clip_mode 'adaptive'", self.dual)
        _require(self.mismatch_cap > 0, f"{p}.mismatch_cap", "a number > 0", self.mismatch_cap)


# The loss option names, read off LossConfig's annotations (one list); toolgym.training.losses takes its
# names from here, CLIP_MODES less "none" (the config's spelling of clip=None), so the two cannot differ.
_LOSS_HINTS = typing.get_type_hints(LossConfig)
RATIOS: tuple[str, ...] = typing.get_args(_LOSS_HINTS["ratio"])
AGGS: tuple[str, ...] = typing.get_args(_LOSS_HINTS["agg"])
CLIP_MODES: tuple[str, ...] = typing.get_args(_LOSS_HINTS["clip_mode"])


@dataclass
class AdvantageConfig:
    estimator: Literal["grpo", "drgrpo", "rloo"] = "grpo"
    eps: float = 1e-6

    def _check(self, p: str) -> None:
        _require(self.eps >= 0, f"{p}.eps", "a number >= 0", self.eps)


@dataclass
class OptimizerConfig:
    name: Literal["adamw"] = "adamw"
    lr: float = 1e-6
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.01
    grad_clip: float | None = 1.0  # max global grad norm; null: no clipping
    warmup_steps: int = 0
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    min_lr_ratio: float = 0.0  # final lr / lr for linear and cosine decay

    def lr_factor(self, step: int, total_steps: int) -> float:
        """Multiplier of ``lr`` at optimizer step ``step`` (0-based): linear warmup, then the schedule.

        For ``torch.optim.lr_scheduler.LambdaLR(opt, lambda s: cfg.lr_factor(s, total))``.
        """
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        if self.schedule == "constant":
            return 1.0
        span = max(total_steps - self.warmup_steps, 1)
        progress = min(max(step - self.warmup_steps, 0) / span, 1.0)
        if self.schedule == "linear":
            shape = 1.0 - progress
        else:
            shape = 0.5 * (1.0 + math.cos(math.pi * progress))
        return self.min_lr_ratio + (1.0 - self.min_lr_ratio) * shape

    def _check(self, p: str) -> None:
        _require(self.lr > 0, f"{p}.lr", "a number > 0", self.lr)
        _require(all(0 <= b < 1 for b in self.betas), f"{p}.betas", "two numbers in [0, 1)", list(self.betas))
        _require(self.eps > 0, f"{p}.eps", "a number > 0", self.eps)
        _require(self.weight_decay >= 0, f"{p}.weight_decay", "a number >= 0", self.weight_decay)
        _require(self.grad_clip is None or self.grad_clip > 0, f"{p}.grad_clip", "null or a number > 0", self.grad_clip)
        _require(self.warmup_steps >= 0, f"{p}.warmup_steps", "an integer >= 0", self.warmup_steps)
        _require(0 <= self.min_lr_ratio <= 1, f"{p}.min_lr_ratio", "a number in [0, 1]", self.min_lr_ratio)


@dataclass
class RolloutConfig:
    env: str = "toolgym/Arith-v0"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    split: str = "train"
    group_size: int = 8
    prompts_per_step: int = 512
    max_turns: int = 5
    max_new_tokens: int = 1024  # per assistant turn
    max_response_tokens: int = 8000  # whole response, tool output included
    temperature: float = 1.0
    top_p: float = 1.0
    sampler: Literal["hf", "vllm", "openai"] = "hf"
    base_url: str | None = None  # openai sampler
    sampler_kwargs: dict[str, Any] = field(default_factory=dict)
    # openai: the server's weights never change during training; true trains on that frozen policy knowingly
    frozen_policy_ok: bool = False
    # vllm on the trainer's GPU: sleep the engine (free its memory) during each update; null: on when the
    # trainer runs on CUDA (the CPU build has no sleep mode)
    vllm_sleep: bool | None = None
    sandbox: str | None = "auto"  # one shared sandbox pool for all envs: auto, docker, local; null: none
    sandbox_pool: int = 0  # workers in that pool; 0: the number of CPU cores
    # the model's tool-call format (hermes, llama3_json, pythonic, mistral, qwen3_coder, gpt_oss, deepseek_v3);
    # null: read from the tokenizer's chat template (docs/tool-calling.md)
    tool_parser: str | None = None

    def _check(self, p: str) -> None:
        if self.tool_parser is not None:
            from toolgym.envs.parsing import FORMATS

            _require(self.tool_parser in FORMATS, f"{p}.tool_parser", f"null or one of {', '.join(FORMATS)}",
                     self.tool_parser)
        _require(self.sandbox in (None, "auto", "docker", "local"), f"{p}.sandbox", "'auto', 'docker', 'local' or null", self.sandbox)
        _require(self.sandbox_pool >= 0, f"{p}.sandbox_pool", "an integer >= 0", self.sandbox_pool)
        _require(self.group_size >= 2, f"{p}.group_size", "an integer >= 2 (advantages are group-relative)", self.group_size)
        for name in ("prompts_per_step", "max_turns", "max_new_tokens", "max_response_tokens"):
            _require(getattr(self, name) >= 1, f"{p}.{name}", "an integer >= 1", getattr(self, name))
        _require(self.temperature > 0, f"{p}.temperature", "a number > 0", self.temperature)
        _require(0 < self.top_p <= 1, f"{p}.top_p", "a number in (0, 1]", self.top_p)
        _require(self.sampler != "openai" or bool(self.base_url), f"{p}.base_url", "a URL when sampler is 'openai'", self.base_url)
        if self.top_p < 1:  # the trainer scores softmax(logits / temperature): no truncation (docs/algorithms/ctpo.md)
            raise ConfigError(f"{p}.top_p={self.top_p:g} truncates the sampling distribution, so the trainer's log-probs "
                              "would not be the behaviour policy's: use top_p: 1.0 for training (lower "
                              f"{p}.temperature to sharpen sampling; eval.top_p may stay below 1)")
        if self.sampler == "openai" and not self.frozen_policy_ok:
            raise ConfigError(f"{p}.sampler=openai cannot receive weight updates during training (the server's weights "
                              "stay frozen, so every step would sample the initial policy): use sampler: hf or vllm, "
                              "evaluate with `toolgym bench --sampler openai`, or set "
                              f"{p}.frozen_policy_ok: true to train on the frozen policy knowingly")


@dataclass
class LoraConfig:
    """LoRA adapters through peft: only they train; checkpoints, exports and vLLM get the merged weights."""

    r: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    # module names (peft's target_modules) or "all-linear"
    target_modules: list[str] | str = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])

    def _check(self, p: str) -> None:
        _require(self.r >= 1, f"{p}.r", "an integer >= 1", self.r)
        _require(self.alpha > 0, f"{p}.alpha", "a number > 0", self.alpha)
        _require(0 <= self.dropout < 1, f"{p}.dropout", "a number in [0, 1)", self.dropout)
        _require(bool(self.target_modules), f"{p}.target_modules", "module names or 'all-linear'", self.target_modules)


@dataclass
class ModelConfig:
    name_or_path: str = ""  # asset name, local folder, or hub id
    tokenizer: str | None = None  # default: the model's own
    # bf16: mixed precision: fp32 master weights and optimizer, forward and loss under torch.autocast(bfloat16);
    # with LoRA the frozen base is stored in bf16 (the adapters stay fp32)
    dtype: Literal["fp32", "bf16"] = "fp32"
    gradient_checkpointing: bool = False
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    # auto | cpu | cuda | cuda:N; auto takes CUDA when available; torchrun ranks take cuda:LOCAL_RANK
    device: str = "auto"
    lora: LoraConfig | None = None  # null: full fine-tuning
    # dropout (the model's and LoRA's) during policy updates; off by default: the old log-probs are computed
    # without it, so with it the ratio is not 1 on-policy and CTPO's cumulative ratio sums that noise
    update_dropout: bool = False
    # log-probs of the sampled tokens: chunked (the LM head at response positions only, chunk by chunk,
    # recomputed in backward: nothing of size [B, T, V] kept) or full (logits at every position, the old path)
    logprob_head: Literal["chunked", "full"] = "chunked"
    # one prompt forward per group: the G completions of a prompt run on its KV cache (gradient flows back
    # through it); auto: where the run allows it (one process, no FSDP, no gradient checkpointing or update
    # dropout, a model whose cache serves), else the per-row path and one log line; on: refuse a run that rules
    # it out; off: every row forwards its prompt (docs/memory.md)
    share_prompt: Literal["auto", "on", "off"] = "auto"

    def _check(self, p: str) -> None:
        _require(bool(self.name_or_path), f"{p}.name_or_path", "a model asset name, folder or id", self.name_or_path)
        from toolgym.devices import check_device

        self.device = check_device(self.device, f"{p}.device")


@dataclass
class EvalConfig:
    every: int = 20  # steps; 0 disables periodic evaluation
    tasks: int = 100
    split: str = "test"
    env: str | None = None  # default: rollout.env
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    samples: int = 1  # samples per task (avg@k)
    temperature: float = 0.7
    top_p: float = 1.0
    at_start: bool = True  # evaluate before the first step (the "before" of the before/after table)

    def _check(self, p: str) -> None:
        _require(self.every >= 0, f"{p}.every", "an integer >= 0 (0 disables)", self.every)
        _require(self.tasks >= 1, f"{p}.tasks", "an integer >= 1", self.tasks)
        _require(self.samples >= 1, f"{p}.samples", "an integer >= 1", self.samples)
        _require(self.temperature >= 0, f"{p}.temperature", "a number >= 0", self.temperature)
        _require(0 < self.top_p <= 1, f"{p}.top_p", "a number in (0, 1]", self.top_p)


@dataclass
class CheckpointConfig:
    every: int = 50  # steps; 0: only at the end
    keep_last: int = 2

    def _check(self, p: str) -> None:
        _require(self.every >= 0, f"{p}.every", "an integer >= 0", self.every)
        _require(self.keep_last >= 1, f"{p}.keep_last", "an integer >= 1", self.keep_last)


@dataclass
class LoggingConfig:
    jsonl: bool = True
    tensorboard: bool = False
    wandb: bool = False
    wandb_project: str | None = None
    progress: bool = True
    plot: bool = True  # PNG of reward and eval curves at the end
    log_every: int = 1
    save_rollouts: bool = False  # each step's rollouts to OUTPUT_DIR/rollouts/step-NNNN.jsonl (+ .meta.json)

    def _check(self, p: str) -> None:
        _require(self.log_every >= 1, f"{p}.log_every", "an integer >= 1", self.log_every)


@dataclass
class SFTConfig:
    """Supervised warm start before RL: demonstrations from a JSONL file or generated by the env."""

    enabled: bool = False
    data: str | None = None  # JSONL of demonstrations
    demos: int = 0  # number of env-generated demonstrations (when no data file)
    epochs: int = 1
    lr: float = 1e-5
    batch_size: int = 8
    max_seq_len: int = 1024
    tool_fraction: float = 0.5  # env-generated demos: share that use the tool (the rest answer directly)
    direct_correct: float = 0.2  # env-generated demos: share of direct answers that are right

    def _check(self, p: str) -> None:
        for name in ("tool_fraction", "direct_correct"):
            _require(0 <= getattr(self, name) <= 1, f"{p}.{name}", "a number in [0, 1]", getattr(self, name))
        if self.enabled:
            _require(bool(self.data) or self.demos > 0, f"{p}.data", "a JSONL path, or sft.demos > 0", self.data)
        _require(self.demos >= 0, f"{p}.demos", "an integer >= 0", self.demos)
        _require(self.epochs >= 1, f"{p}.epochs", "an integer >= 1", self.epochs)
        _require(self.lr > 0, f"{p}.lr", "a number > 0", self.lr)
        _require(self.batch_size >= 1, f"{p}.batch_size", "an integer >= 1", self.batch_size)
        _require(self.max_seq_len >= 1, f"{p}.max_seq_len", "an integer >= 1", self.max_seq_len)


@dataclass
class RayConfig:
    """Rollouts on Ray (``distributed: ray``): workers each own a sampler replica, envs and a sandbox pool."""

    address: str | None = None  # "host:port" of a running cluster (`ray start --head`); null/"local": start one here
    num_workers: int = 2  # rollout-worker actors
    cpus_per_worker: float = 1.0  # Ray CPUs reserved per worker (also its torch threads)
    sandbox_pool: int = 1  # sandboxes each worker keeps warm (its node's tool capacity)
    max_in_flight: int = 2  # groups submitted per worker at a time (back-pressure)
    num_cpus: int | None = None  # local cluster only: CPUs it advertises (default: the machine's)
    max_replacements: int = 8  # dead workers replaced per run before giving up

    def _check(self, p: str) -> None:
        for name in ("num_workers", "sandbox_pool", "max_in_flight"):
            _require(getattr(self, name) >= 1, f"{p}.{name}", "an integer >= 1", getattr(self, name))
        _require(self.cpus_per_worker > 0, f"{p}.cpus_per_worker", "a number > 0", self.cpus_per_worker)
        _require(self.num_cpus is None or self.num_cpus >= 1, f"{p}.num_cpus", "null or an integer >= 1", self.num_cpus)
        _require(self.max_replacements >= 0, f"{p}.max_replacements", "an integer >= 0", self.max_replacements)


@dataclass
class TrainConfig:
    """One training run. ``mini_batches`` optimizer steps per rollout batch (the later ones are off-policy)."""

    algorithm: str = "ctpo"
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    mini_batches: int = 16
    update_epochs: int = 1  # passes over the rollout batch
    grad_accum: int = 1  # micro-batches per mini-batch: at most rows / grad_accum rows each
    # padded tokens (rows x longest row) per micro-batch, rows bucketed by length; a longer row runs alone.
    # null: no budget (grad_accum alone cuts). Also cuts the no-grad pass of the old log-probs.
    max_tokens_per_micro_batch: int | None = None
    steps: int = 305
    seed: int = 0
    output_dir: str = "runs/toolgym"
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    distributed: Literal["none", "ray"] = "none"  # ray: rollouts on Ray workers (see the ray section)
    ray: RayConfig = field(default_factory=RayConfig)
    options: Any = None  # the algorithm's own section, when it registered one

    def _check(self, p: str) -> None:
        for name in ("mini_batches", "update_epochs", "grad_accum", "steps"):
            _require(getattr(self, name) >= 1, name, "an integer >= 1", getattr(self, name))
        _require(self.rollout.prompts_per_step % self.mini_batches == 0, "mini_batches",
                 f"a divisor of rollout.prompts_per_step ({self.rollout.prompts_per_step})", self.mini_batches)
        per_mini = self.rollout.prompts_per_step // self.mini_batches * self.rollout.group_size
        _require(per_mini % self.grad_accum == 0, "grad_accum",
                 f"a divisor of the {per_mini} trajectories of one mini-batch", self.grad_accum)
        _require(self.max_tokens_per_micro_batch is None or self.max_tokens_per_micro_batch >= 1,
                 "max_tokens_per_micro_batch", "null or an integer >= 1", self.max_tokens_per_micro_batch)
        _require(bool(self.output_dir), "output_dir", "a folder path", self.output_dir)
        _require(self.distributed != "ray" or self.rollout.sampler == "hf", "rollout.sampler",
                 "'hf' with distributed: ray (Ray workers run transformers replicas)", self.rollout.sampler)


# ---------------------------------------------------------------- parsing


def _require(ok: bool, path: str, allowed: str, got: Any) -> None:
    if not ok:
        raise ConfigError(f"{path}: must be {allowed}; got {got!r}")


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        parts = [_type_name(a) for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(parts) + " or null"
    if origin is tuple:
        return f"a list of {len(typing.get_args(tp))} numbers"
    if origin is dict or tp is dict:
        return "a mapping"
    if origin is list:
        return "a list"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(tp, getattr(tp, "__name__", str(tp)))


def _convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(f"{path}: must be {_type_name(tp)}; got {value!r}")
        return value
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return _convert(a, value, path)
            except ConfigError:
                continue
        raise ConfigError(f"{path}: must be {_type_name(tp)}; got {value!r}")
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, path)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: must be true or false; got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: must be an integer; got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads "1e-6" as a string
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"{path}: must be a number; got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"{path}: must be a finite number; got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: must be a string; got {value!r}")
        return value
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise ConfigError(f"{path}: must be {_type_name(tp)}; got {value!r}")
        return tuple(_convert(a, v, f"{path}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True)))
    if origin is list:
        (arg,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{path}: must be a list; got {value!r}")
        return [_convert(arg, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: must be a mapping; got {value!r}")
        return dict(value)
    raise TypeError(f"unsupported config type {tp!r} at {path}")


def _build(cls: type, data: Any, path: str) -> Any:
    where = path or "config"
    if data is None:
        data = {}
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        data = dataclasses.asdict(data)
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: must be a mapping of {cls.__name__} fields; got {data!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if not (cls is TrainConfig and f.name == "options")]
    for key in data:
        if key not in names and not (cls is TrainConfig and key == "options"):
            close = difflib.get_close_matches(str(key), names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            dotted = f"{path}.{key}" if path else str(key)
            raise ConfigError(f"unknown key {dotted!r}{hint}; allowed in {where}: {', '.join(names)}")
    kwargs = {k: _convert(hints[k], v, f"{path}.{k}" if path else k) for k, v in data.items() if k in names}
    for k in names:  # absent sections are built from their defaults, and checked like given ones
        if k not in kwargs and dataclasses.is_dataclass(hints[k]):
            kwargs[k] = _build(hints[k], {}, f"{path}.{k}" if path else k)
    obj = cls(**kwargs)
    check = getattr(obj, "_check", None)
    if check is not None:
        check(path)
    return obj


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    cur = data
    for k in keys[:-1]:
        nxt = cur.setdefault(k, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"override {dotted!r}: {k!r} is not a section")
        cur = nxt
    cur[keys[-1]] = value


def load_config(source: str | Path | dict[str, Any], overrides: list[str] | None = None) -> TrainConfig:
    """Read a YAML file (or take a dict), apply ``KEY.PATH=VALUE`` overrides, validate, return a TrainConfig."""
    import yaml

    if isinstance(source, dict):
        data: Any = _deepcopy(source)
    else:
        p = Path(source)
        try:
            data = yaml.safe_load(p.read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {p}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {p} is not valid YAML: {str(exc).splitlines()[0]}") from None
        if data is None:
            data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"config: the top level must be a mapping of sections; got {type(data).__name__}")
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r}: must look like section.key=value")
        _set_dotted(data, key.strip(), yaml.safe_load(raw))

    from toolgym.training.algorithms import get_algorithm  # the registry (torch-free); read at load time

    algorithm = data.get("algorithm", "ctpo")
    if not isinstance(algorithm, str):
        raise ConfigError(f"algorithm: must be a registered algorithm name; got {algorithm!r}")
    spec = get_algorithm(algorithm)
    loss = data.get("loss") or {}
    if not isinstance(loss, dict):
        raise ConfigError(f"loss: must be a mapping of LossConfig fields; got {loss!r}")
    data["loss"] = {**spec.loss, **loss}
    for key, value in spec.defaults.items():
        if key != "loss":
            data.setdefault(key, value)
    options = data.pop("options", None)
    cfg = _build(TrainConfig, data, "")
    opt_cls = spec.options
    if opt_cls is None:
        if options:
            raise ConfigError(f"options: algorithm {algorithm!r} takes no options section; got {options!r}")
    else:
        cfg.options = _build(opt_cls, options, "options")
    return cfg


def _deepcopy(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _deepcopy(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_deepcopy(v) for v in x]
    return x


def config_to_dict(cfg: TrainConfig) -> dict[str, Any]:
    """Plain, YAML/JSON-ready dict (tuples become lists); ``load_config`` of it gives back an equal config."""

    def plain(x: Any) -> Any:
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            return {f.name: plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
        if isinstance(x, (list, tuple)):
            return [plain(v) for v in x]
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        return x

    out = plain(cfg)
    if out.get("options") is None:
        out.pop("options", None)
    return out


def dump_config(cfg: TrainConfig, path: str | Path) -> None:
    """Write the resolved config as YAML (recorded in every run's output folder)."""
    import yaml

    Path(path).write_text(yaml.safe_dump(config_to_dict(cfg), sort_keys=False))
