"""The schema of a training run's config: one dataclass per section, with each field's type, default
and rule written once.

A leaf of :mod:`toolgym.training`: it imports nothing of it, so the algorithm registry, the losses and the
trainer can all read it. Reading YAML, the algorithms' defaults and the type checker live apart
(:mod:`toolgym.training.config`, :mod:`toolgym.training.config_types`). Each section's ``_check(path)``
raises :class:`toolgym.errors.ConfigError` naming the dotted field and what is allowed. Torch-free.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from toolgym.errors import ConfigError

# The loss's names, written once: LossConfig's fields are typed with them, toolgym.training.losses (and its
# fused kernel) take them from here; clip_mode "none" is the config's spelling of ``clip=None``.
Ratio = Literal["cumulative", "token", "sequence", "gspo"]
Agg = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]
ClipMode = Literal["adaptive", "fixed", "none"]
RATIOS: tuple[str, ...] = typing.get_args(Ratio)
AGGS: tuple[str, ...] = typing.get_args(Agg)
CLIP_MODES: tuple[str, ...] = typing.get_args(ClipMode)


def require(ok: bool, path: str, allowed: str, got: Any) -> None:
    """The one line of a broken rule: ``path: must be ALLOWED; got VALUE``."""
    if not ok:
        raise ConfigError(f"{path}: must be {allowed}; got {got!r}")



@dataclass
class LossConfig:
    """Importance ratio, clip and aggregation (defaults come from the algorithm)."""

    ratio: Ratio = "cumulative"
    clip_mode: ClipMode = "adaptive"
    eps_low: float = 0.025  # adaptive: log space, times t^power; fixed: ratio window [1-eps_low, 1+eps_high]
    eps_high: float = 0.05
    power: float = 0.5
    dual: float | None = 0.05  # adaptive: log-space base; fixed: a ratio > 1; null: no dual clip
    agg: Agg = "token-mean"
    mismatch_weight: bool = False  # rollout-vs-trainer weight, per sequence, truncated (docs/algorithms/ctpo.md)
    mismatch_cap: float = 5.0

    def _check(self, p: str) -> None:
        for name in ("eps_low", "eps_high", "power"):
            require(getattr(self, name) >= 0, f"{p}.{name}", "a number >= 0", getattr(self, name))
        if self.clip_mode == "fixed":
            require(self.eps_low <= 1, f"{p}.eps_low", "a number in [0, 1] with clip_mode 'fixed'", self.eps_low)
            require(self.dual is None or self.dual > 1, f"{p}.dual", "null or a ratio > 1 with clip_mode 'fixed'", self.dual)
        elif self.clip_mode == "adaptive":
            require(self.dual is None or self.dual > 0, f"{p}.dual", "null or a number > 0 with clip_mode 'adaptive'", self.dual)
        require(self.mismatch_cap > 0, f"{p}.mismatch_cap", "a number > 0", self.mismatch_cap)


@dataclass
class AdvantageConfig:
    estimator: Literal["grpo", "drgrpo", "rloo"] = "grpo"
    eps: float = 1e-6

    def _check(self, p: str) -> None:
        require(self.eps >= 0, f"{p}.eps", "a number >= 0", self.eps)


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
        require(self.lr > 0, f"{p}.lr", "a number > 0", self.lr)
        require(all(0 <= b < 1 for b in self.betas), f"{p}.betas", "two numbers in [0, 1)", list(self.betas))
        require(self.eps > 0, f"{p}.eps", "a number > 0", self.eps)
        require(self.weight_decay >= 0, f"{p}.weight_decay", "a number >= 0", self.weight_decay)
        require(self.grad_clip is None or self.grad_clip > 0, f"{p}.grad_clip", "null or a number > 0", self.grad_clip)
        require(self.warmup_steps >= 0, f"{p}.warmup_steps", "an integer >= 0", self.warmup_steps)
        require(0 <= self.min_lr_ratio <= 1, f"{p}.min_lr_ratio", "a number in [0, 1]", self.min_lr_ratio)


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
    sampler: str = "hf"  # a registered sampler (toolgym.agents.samplers: hf, vllm, openai, plug-ins)
    base_url: str | None = None  # a remote sampler's server (openai)
    sampler_kwargs: dict[str, Any] = field(default_factory=dict)
    # a sampler that neither runs the trainer's module nor takes weight pushes (openai: a server) samples the
    # initial policy throughout; true trains on that frozen policy knowingly
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

            require(self.tool_parser in FORMATS, f"{p}.tool_parser", f"null or one of {', '.join(FORMATS)}",
                     self.tool_parser)
        require(self.sandbox in (None, "auto", "docker", "local"), f"{p}.sandbox", "'auto', 'docker', 'local' or null", self.sandbox)
        require(self.sandbox_pool >= 0, f"{p}.sandbox_pool", "an integer >= 0", self.sandbox_pool)
        require(self.group_size >= 2, f"{p}.group_size", "an integer >= 2 (advantages are group-relative)", self.group_size)
        for name in ("prompts_per_step", "max_turns", "max_new_tokens", "max_response_tokens"):
            require(getattr(self, name) >= 1, f"{p}.{name}", "an integer >= 1", getattr(self, name))
        require(self.temperature > 0, f"{p}.temperature", "a number > 0", self.temperature)
        require(0 < self.top_p <= 1, f"{p}.top_p", "a number in (0, 1]", self.top_p)
        spec = self.sampler_spec(p)
        require(not spec.remote or bool(self.base_url), f"{p}.base_url", f"a URL when sampler is {self.sampler!r}",
                self.base_url)
        if self.top_p < 1:  # the trainer scores softmax(logits / temperature): no truncation (docs/algorithms/ctpo.md)
            raise ConfigError(f"{p}.top_p={self.top_p:g} truncates the sampling distribution, so the trainer's log-probs "
                              "would not be the behaviour policy's: use top_p: 1.0 for training (lower "
                              f"{p}.temperature to sharpen sampling; eval.top_p may stay below 1)")
        if not spec.follows_training and not self.frozen_policy_ok:
            from toolgym.agents.samplers import names_where

            others = names_where("follows_training")
            whose = "the server's weights" if spec.remote else "its weights"
            raise ConfigError(f"{p}.sampler={self.sampler} cannot receive weight updates during training ({whose} "
                              f"stay frozen, so every step would sample the initial policy): use sampler: {others}, "
                              f"evaluate with `toolgym bench --sampler {self.sampler}`, or set "
                              f"{p}.frozen_policy_ok: true to train on the frozen policy knowingly")

    def sampler_spec(self, p: str = "rollout") -> Any:
        """The registry entry of ``sampler`` (:mod:`toolgym.agents.samplers`, plug-ins included); an unknown
        name fails naming the registered ones."""
        from toolgym.agents.samplers import get_sampler

        return get_sampler(self.sampler, f"{p}.sampler")


@dataclass
class LoraConfig:
    """LoRA adapters through peft: only they train; checkpoints, exports and vLLM get the merged weights."""

    r: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    # module names (peft's target_modules) or "all-linear"
    target_modules: list[str] | str = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])

    def _check(self, p: str) -> None:
        require(self.r >= 1, f"{p}.r", "an integer >= 1", self.r)
        require(self.alpha > 0, f"{p}.alpha", "a number > 0", self.alpha)
        require(0 <= self.dropout < 1, f"{p}.dropout", "a number in [0, 1)", self.dropout)
        require(bool(self.target_modules), f"{p}.target_modules", "module names or 'all-linear'", self.target_modules)


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
        require(bool(self.name_or_path), f"{p}.name_or_path", "a model asset name, folder or id", self.name_or_path)
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
        require(self.every >= 0, f"{p}.every", "an integer >= 0 (0 disables)", self.every)
        require(self.tasks >= 1, f"{p}.tasks", "an integer >= 1", self.tasks)
        require(self.samples >= 1, f"{p}.samples", "an integer >= 1", self.samples)
        require(self.temperature >= 0, f"{p}.temperature", "a number >= 0", self.temperature)
        require(0 < self.top_p <= 1, f"{p}.top_p", "a number in (0, 1]", self.top_p)


@dataclass
class CheckpointConfig:
    every: int = 50  # steps; 0: only at the end
    keep_last: int = 2

    def _check(self, p: str) -> None:
        require(self.every >= 0, f"{p}.every", "an integer >= 0", self.every)
        require(self.keep_last >= 1, f"{p}.keep_last", "an integer >= 1", self.keep_last)


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
        require(self.log_every >= 1, f"{p}.log_every", "an integer >= 1", self.log_every)


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
            require(0 <= getattr(self, name) <= 1, f"{p}.{name}", "a number in [0, 1]", getattr(self, name))
        if self.enabled:
            require(bool(self.data) or self.demos > 0, f"{p}.data", "a JSONL path, or sft.demos > 0", self.data)
        require(self.demos >= 0, f"{p}.demos", "an integer >= 0", self.demos)
        require(self.epochs >= 1, f"{p}.epochs", "an integer >= 1", self.epochs)
        require(self.lr > 0, f"{p}.lr", "a number > 0", self.lr)
        require(self.batch_size >= 1, f"{p}.batch_size", "an integer >= 1", self.batch_size)
        require(self.max_seq_len >= 1, f"{p}.max_seq_len", "an integer >= 1", self.max_seq_len)


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
            require(getattr(self, name) >= 1, f"{p}.{name}", "an integer >= 1", getattr(self, name))
        require(self.cpus_per_worker > 0, f"{p}.cpus_per_worker", "a number > 0", self.cpus_per_worker)
        require(self.num_cpus is None or self.num_cpus >= 1, f"{p}.num_cpus", "null or an integer >= 1", self.num_cpus)
        require(self.max_replacements >= 0, f"{p}.max_replacements", "an integer >= 0", self.max_replacements)


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
    # the algorithm's own section, when it registered one: typed by that dataclass, built by the loader
    options: Any = field(default=None, metadata={"typed_by": "algorithm"})

    def _check(self, p: str) -> None:
        for name in ("mini_batches", "update_epochs", "grad_accum", "steps"):
            require(getattr(self, name) >= 1, name, "an integer >= 1", getattr(self, name))
        require(self.rollout.prompts_per_step % self.mini_batches == 0, "mini_batches",
                 f"a divisor of rollout.prompts_per_step ({self.rollout.prompts_per_step})", self.mini_batches)
        per_mini = self.rollout.prompts_per_step // self.mini_batches * self.rollout.group_size
        require(per_mini % self.grad_accum == 0, "grad_accum",
                 f"a divisor of the {per_mini} trajectories of one mini-batch", self.grad_accum)
        require(self.max_tokens_per_micro_batch is None or self.max_tokens_per_micro_batch >= 1,
                 "max_tokens_per_micro_batch", "null or an integer >= 1", self.max_tokens_per_micro_batch)
        require(bool(self.output_dir), "output_dir", "a folder path", self.output_dir)
        spec = self.rollout.sampler_spec()
        require(self.distributed != "ray" or spec.in_process, "rollout.sampler",
                "an in-process sampler ('hf') with distributed: ray (Ray workers run transformers replicas)",
                self.rollout.sampler)
        require(not self.loss.mismatch_weight or spec.logprobs, "loss.mismatch_weight",
                f"false with sampler {self.rollout.sampler!r} (it returns no behaviour log-probs)", True)
