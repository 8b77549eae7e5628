"""The schema of a training run's config: one dataclass per section, with each field's type, default,
rule and help text written once.

A field's help is on the field itself (:func:`described`: ``dataclasses.field(metadata={"help": ...})``);
the config reference (docs/training/config.md) is generated from it, and its build fails on a field without.

A leaf of :mod:`toolgym.training`: it imports nothing of it, so the algorithm registry, the losses and the
trainer can all read it. Reading YAML, the algorithms' defaults and the type checker live apart
(:mod:`toolgym.training.config`, :mod:`toolgym.training.config_types`). Each section's ``_check(path)``
raises :class:`toolgym.errors.ConfigError` naming the dotted field and what is allowed. Torch-free.
"""

from __future__ import annotations

import math
import typing
from dataclasses import MISSING, dataclass, field
from typing import Any, Literal

from toolgym.errors import ConfigError

# The loss's names, written once: LossConfig's fields are typed with them, toolgym.training.policy_gradient.losses
# (and its fused kernel) take them from here; clip_mode "none" is the config's spelling of ``clip=None``.
Ratio = Literal["cumulative", "token", "sequence", "gspo"]
Agg = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]
ClipMode = Literal["adaptive", "fixed", "none"]
RATIOS: tuple[str, ...] = typing.get_args(Ratio)
AGGS: tuple[str, ...] = typing.get_args(Agg)
CLIP_MODES: tuple[str, ...] = typing.get_args(ClipMode)


def described(default: Any = MISSING, help: str = "", *, factory: Any = MISSING, **metadata: Any) -> Any:
    """A dataclass field with its help text in ``metadata["help"]`` (whitespace is folded where it is read),
    which the config reference prints; ``factory``: a ``default_factory``; other keywords go into the
    metadata too. A plain ``field(metadata={"help": ...})`` is the same."""
    return field(default=default, default_factory=factory, metadata={**metadata, "help": help})


def require(ok: bool, path: str, allowed: str, got: Any) -> None:
    """The one line of a broken rule: ``path: must be ALLOWED; got VALUE``."""
    if not ok:
        raise ConfigError(f"{path}: must be {allowed}; got {got!r}")


def clip_problem(mode: str, eps_low: Any, eps_high: Any, power: Any, dual: Any, *, mode_field: str = "clip_mode",
                 null: str = "null") -> tuple[str, str, Any] | None:
    """The first broken clip rule as ``(field, allowed, got)``, None when all hold: the one place they are
    written, read by ``LossConfig._check`` (a config) and by the loss's own ``ClipConfig``."""
    def number(v: Any) -> bool:
        return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)

    for name, v in (("eps_low", eps_low), ("eps_high", eps_high), ("power", power)):
        if not (number(v) and v >= 0):
            return name, "a finite number >= 0", v
    if dual is not None and not number(dual):
        return "dual", f"{null} or a finite number", dual
    if mode == "fixed" and eps_low > 1:
        return "eps_low", f"a number in [0, 1] with {mode_field} 'fixed'", eps_low
    if mode == "fixed" and dual is not None and dual <= 1:
        return "dual", f"{null} or a ratio > 1 with {mode_field} 'fixed'", dual
    if mode == "adaptive" and dual is not None and dual <= 0:
        return "dual", f"{null} or a number > 0 with {mode_field} 'adaptive'", dual
    return None



@dataclass
class LossConfig:
    """Importance ratio, clip and aggregation (defaults come from the algorithm)."""

    ratio: Ratio = described("cumulative", """
        The importance ratio of each policy token: cumulative (CTPO: the product of the token ratios of the
        response so far), token (PPO/GRPO: the token's own), sequence (the whole response's, full IS) or
        gspo (the length-normalised sequence ratio).""")
    clip_mode: ClipMode = described("adaptive", """
        adaptive: a log-space window around ratio 1 that widens with the token position t as t^power (CTPO);
        fixed: PPO's ratio window [1-eps_low, 1+eps_high]; none: no clip.""")
    eps_low: float = described(0.025, """
        Lower clip width. adaptive: in log space, times t^power; fixed: the ratio window's lower edge is
        1-eps_low.""")
    eps_high: float = described(0.05, """
        Upper clip width. adaptive: in log space, times t^power; fixed: the ratio window's upper edge is
        1+eps_high.""")
    power: float = described(0.5, """
        adaptive only: the window at the t-th policy token is scaled by t^power (0: the same width at every
        token).""")
    dual: float | None = described(0.05, """
        Dual clip for negative advantages. adaptive: a log-space base (times t^power); fixed: a ratio > 1;
        null: no dual clip.""")
    agg: Agg = described("token-mean", """
        How token losses become one number: token-mean (over every policy token of the mini-batch),
        seq-mean-token-mean (mean per response, then over responses) or seq-mean-token-sum (sum per
        response, then mean over responses).""")
    mismatch_weight: bool | None = described(None, """
        Multiply each response's loss by the truncated rollout-vs-trainer weight exp(trainer log-prob -
        sampler log-prob), per sequence (docs/algorithms/ctpo.md); needs a sampler that returns log-probs.
        null: on exactly when rollout.max_staleness >= 1 (the correction of stale rollouts); true/false
        force it.""")
    mismatch_cap: float = described(5.0, """
        Upper truncation of that weight (used with mismatch_weight).""")

    def _check(self, p: str) -> None:
        bad = clip_problem(self.clip_mode, self.eps_low, self.eps_high, self.power, self.dual)
        if bad is not None:
            require(False, f"{p}.{bad[0]}", bad[1], bad[2])
        require(self.mismatch_cap > 0, f"{p}.mismatch_cap", "a number > 0", self.mismatch_cap)


@dataclass
class AdvantageConfig:
    """Group-relative advantages: how each group's rewards are centred (and scaled)."""

    estimator: Literal["grpo", "drgrpo", "rloo"] = described("grpo", """
        How a group's rewards become advantages: grpo (R - group mean) / (group std + eps); drgrpo R - group
        mean (no std); rloo R - mean of the group's other members.""")
    eps: float = described(1e-6, """
        Added to the group's standard deviation (grpo), so a group whose rewards are all equal gets
        advantage 0 rather than a division by zero.""")

    def _check(self, p: str) -> None:
        require(self.eps >= 0, f"{p}.eps", "a number >= 0", self.eps)


@dataclass
class OptimizerConfig:
    """AdamW for the RL updates, with linear warmup and a constant, linear or cosine schedule."""

    name: Literal["adamw"] = described("adamw", """
        The optimizer; adamw (torch.optim.AdamW) is the only one.""")
    lr: float = described(1e-6, """
        Peak learning rate of the RL updates, reached after warmup.""")
    betas: tuple[float, float] = described((0.9, 0.999), """
        AdamW's (beta1, beta2): decay rates of the gradient's running mean and running square.""")
    eps: float = described(1e-8, """
        AdamW's epsilon, added to the denominator.""")
    weight_decay: float = described(0.01, """
        AdamW's decoupled weight decay.""")
    grad_clip: float | None = described(1.0, """
        Maximum global gradient norm per optimizer step; null: no clipping.""")
    warmup_steps: int = described(0, """
        Optimizer steps of linear warmup: the lr rises from lr/warmup_steps to lr.""")
    schedule: Literal["constant", "linear", "cosine"] = described("constant", """
        The lr after warmup: constant, or a linear or cosine decay to min_lr_ratio x lr at the last
        optimizer step.""")
    min_lr_ratio: float = described(0.0, """
        Final lr / lr for the linear and cosine schedules.""")

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


DEFAULT_ENV = "toolgym/Arith-v0"


def env_label(env_id: str) -> str:
    """An environment id as metrics name it: without the ``module:`` prefix that imports a user's module."""
    module, sep, rest = env_id.partition(":")
    return rest if sep and module and "/" not in module else env_id


@dataclass
class EnvEntry:
    """One environment of a mixture (``rollout.envs``): its id, its share of each step's prompts and its
    constructor arguments."""

    env: str = described("", """
        The environment: an id from `toolgym envs list`, or `module:id` (a .py file in the current folder that
        registers it). Required.""")
    weight: float = described(1.0, """
        Its share of each step's prompts: weight / the sum of the weights (each step gives it that share of
        rollout.prompts_per_step, rounded down or up at random so the expected count is exact).""")
    env_kwargs: dict[str, Any] = described(factory=dict, help="""
        Keyword arguments for its constructor; the trainer adds the split and the shared sandbox.""")
    name: str | None = described(None, """
        Its label in metrics (reward_mean/NAME, episodes/NAME), evaluations and saved rollouts; null: the id
        without a module: prefix. Names must differ (give one when an id appears twice).""")

    def _check(self, p: str) -> None:
        require(bool(self.env), f"{p}.env", "an environment id (`toolgym envs list`)", self.env)
        require(self.weight > 0, f"{p}.weight", "a number > 0", self.weight)
        require(self.name is None or bool(self.name.strip()), f"{p}.name", "null or a non-empty string", self.name)

    @property
    def label(self) -> str:
        return self.name or env_label(self.env)


@dataclass
class RolloutConfig:
    """How each step's training rollouts are sampled."""

    env: str | None = described(None, """
        The environment to train on: an id from `toolgym envs list`, built in or registered (also by a
        plug-in); null: toolgym/Arith-v0, unless envs is given.""")
    env_kwargs: dict[str, Any] = described(factory=dict, help="""
        Keyword arguments for the environment's constructor; the trainer adds the split and the shared
        sandbox.""")
    envs: list[EnvEntry] = described(factory=list, help="""
        Several environments in one run, instead of env: a list of {env, weight, env_kwargs, name}. Each
        step's prompts are split among them by weight (seeded by seed and the step, so a resume repeats it);
        a group never mixes environments; metrics, evaluation and saved rollouts are per environment
        (docs/training/index.md, 'Several environments in one run').""")
    split: str = described("train", """
        The task split that training prompts are drawn from (evaluation uses eval.split).""")
    group_size: int = described(8, """
        Rollouts per prompt (G); advantages compare each rollout with the rest of its group, so at least 2.""")
    prompts_per_step: int = described(512, """
        Prompts (tasks) per training step; each gets group_size rollouts, so one step trains on
        prompts_per_step x group_size trajectories.""")
    max_turns: int = described(5, """
        Assistant turns per episode (each may call tools) before the episode is cut off.""")
    max_new_tokens: int = described(1024, """
        Tokens the model may generate in one assistant turn.""")
    max_response_tokens: int = described(8000, """
        Tokens of the whole response (every turn, tool output included) before the episode is cut off.""")
    temperature: float = described(1.0, """
        Sampling temperature; the trainer scores the tokens with softmax(logits / temperature), so ratios
        stay exact.""")
    top_p: float = described(1.0, """
        Nucleus sampling; must be 1.0 for training (a truncated distribution is not the one the trainer
        scores); eval.top_p may be lower.""")
    sampler: str = described("hf", """
        The rollout backend: a registered sampler (toolgym.agents.samplers: hf, vllm, openai, vllm_server, plug-ins).""")
    base_url: str | None = described(None, """
        A remote sampler's server URL (openai); required by remote samplers.""")
    sampler_kwargs: dict[str, Any] = described(factory=dict, help="""
        Keyword arguments for the sampler's constructor; they override the trainer's defaults (e.g. vllm:
        gpu_memory_utilization, max_model_len).""")
    frozen_policy_ok: bool = described(False, """
        A sampler that neither runs the trainer's module nor takes weight pushes (openai: a server) samples
        the initial policy throughout; true trains on that frozen policy knowingly.""")
    vllm_sleep: bool | None = described(None, """
        vllm on the trainer's GPU: sleep the engine (free its memory) during each update; null: on when the
        trainer runs on CUDA (the CPU build has no sleep mode).""")
    sandbox: str | None = described("auto", """
        One shared sandbox pool for all environments: auto (Docker if it works, else local), docker, local;
        null: none.""")
    sandbox_pool: int = described(0, """
        Workers in that pool; 0: the number of CPU cores.""")
    tool_parser: str | None = described(None, """
        The model's tool-call format (hermes, llama3_json, pythonic, mistral, qwen3_coder, gpt_oss,
        deepseek_v3); null: read from the tokenizer's chat template (docs/tool-calling.md).""")
    max_staleness: int = described(0, """
        Policy versions a training group may lag behind the weights it is trained from. 0: every step
        samples the current weights, then updates (synchronous). K >= 1: step s+K is sampled while the
        trainer updates on step s, by rollout workers holding the weights of K updates ago (or by vLLM servers,
        sampler vllm_server, as rollout.push_on says); an older group is dropped and counted
        (docs/training/pipeline.md).""")
    workers: int = described(0, """
        Rollout worker processes: each holds a sampler replica (with sampler vllm_server: a client of the
        servers, no weights) and runs the environments, reward functions and model-text parsing, so the
        trainer's process runs none of them. 0: rollouts in the trainer's own
        process (max_staleness 0 only; with max_staleness >= 1, 0 means one worker).""")
    servers: int | list[str] = described(1, """
        sampler vllm_server: how many server processes to start on 127.0.0.1 (each a full copy of the model,
        behind one router that keeps a group's requests on one server; with distributed: ray, server actors,
        one per GPU or CPU), or a list of URLs of servers already
        running on this machine (started with VLLM_SERVER_DEV_MODE=1 and --enable-scale-out;
        docs/training/pipeline.md).""")
    partial: bool = described(False, """
        sampler vllm_server: what a weight push does to requests in flight. false: they finish on the old
        weights (tagged with its version); true: they are interrupted and resumed on the new weights (partial
        rollouts: their tokens carry both versions).""")
    push_on: str | None = described(None, """
        sampler vllm_server with max_staleness >= 1: when a new policy version reaches the servers. schedule:
        once every group scheduled on the version before has returned, so each token's version is the
        schedule's, a run repeats and a resume is exact; update: as soon as the update ends, while a step is
        still sampling (fresher tokens, which ones set by timing; the only choice with partial: true).
        null: schedule, or update with partial: true (docs/training/pipeline.md).""")
    group_deadline_s: float = described(1800.0, """
        Wall-clock seconds a rollout worker may spend on one group; past it the worker is killed and
        replaced, and only that group's episodes fail (counted as infrastructure failures). 0: no limit.""")

    def _check(self, p: str) -> None:
        self._check_mixture(p)
        require(self.max_staleness >= 0, f"{p}.max_staleness", "an integer >= 0", self.max_staleness)
        require(self.workers >= 0, f"{p}.workers", "an integer >= 0", self.workers)
        require(isinstance(self.servers, list) and bool(self.servers) or isinstance(self.servers, int)
                and self.servers >= 1, f"{p}.servers", "an integer >= 1 or a list of server URLs", self.servers)
        require(self.group_deadline_s >= 0, f"{p}.group_deadline_s", "a number >= 0 (0: no limit)",
                self.group_deadline_s)
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
        require(self.push_on in (None, "schedule", "update"), f"{p}.push_on", "null, 'schedule' or 'update'",
                self.push_on)
        require(not (self.partial and self.push_on == "schedule"), f"{p}.push_on",
                "'update' or null with partial: true (a scheduled push has no request in flight to interrupt)",
                self.push_on)
        for name, unset in (("servers", 1), ("partial", False), ("push_on", None)):
            require(getattr(self, name) == unset or spec.pushes_while_sampling, f"{p}.{name}",
                    f"{'null' if unset is None else str(unset).lower()} (left out) unless sampler is a server sampler ('vllm_server')", getattr(self, name))
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

    def _check_mixture(self, p: str) -> None:
        if not self.envs:
            if self.env is None:
                self.env = DEFAULT_ENV
            return
        if self.env is not None:
            raise ConfigError(f"{p}.env and {p}.envs: give one (env: ONE_ID, or envs: a list of {{env, weight, "
                              f"env_kwargs}}); got env {self.env!r} and {len(self.envs)} envs")
        if self.env_kwargs:
            raise ConfigError(f"{p}.env_kwargs: with {p}.envs each environment takes its own env_kwargs "
                              f"({p}.envs[i].env_kwargs); got {self.env_kwargs!r}")
        seen: dict[str, int] = {}
        for i, e in enumerate(self.envs):
            if e.label in seen:
                raise ConfigError(f"{p}.envs[{i}]: its name {e.label!r} is also envs[{seen[e.label]}]'s; give each "
                                  f"entry a distinct name (metrics and evaluations are per name)")
            seen[e.label] = i

    def mixture(self) -> list[EnvEntry]:
        """The environments this run trains on: ``envs``, or ``env`` as a one-entry mixture."""
        if self.envs:
            return list(self.envs)
        return [EnvEntry(env=self.env or DEFAULT_ENV, weight=1.0, env_kwargs=dict(self.env_kwargs))]

    def sampler_spec(self, p: str = "rollout") -> Any:
        """The registry entry of ``sampler`` (:mod:`toolgym.agents.samplers`, plug-ins included); an unknown
        name fails naming the registered ones."""
        from toolgym.agents.samplers import get_sampler

        return get_sampler(self.sampler, f"{p}.sampler")


@dataclass
class LoraConfig:
    """LoRA adapters through peft: only they train; checkpoints, exports and vLLM get the merged weights."""

    r: int = described(16, """
        Rank of the LoRA update matrices.""")
    alpha: float = described(32.0, """
        LoRA scale numerator: the update is scaled by alpha / r.""")
    dropout: float = described(0.0, """
        Dropout on the LoRA path; it acts only in updates with model.update_dropout: true.""")
    target_modules: list[str] | str = described(factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"], help="""
        The modules that get adapters: module names (peft's target_modules) or "all-linear".""")

    def _check(self, p: str) -> None:
        require(self.r >= 1, f"{p}.r", "an integer >= 1", self.r)
        require(self.alpha > 0, f"{p}.alpha", "a number > 0", self.alpha)
        require(0 <= self.dropout < 1, f"{p}.dropout", "a number in [0, 1)", self.dropout)
        require(bool(self.target_modules), f"{p}.target_modules", "module names or 'all-linear'", self.target_modules)


@dataclass
class ModelConfig:
    """The policy model: its weights, precision, device, LoRA and how its log-probs are computed."""

    name_or_path: str = described("", """
        The policy's weights: a model asset name (`toolgym assets list`), a local folder or a Hugging Face
        hub id. Required.""")
    tokenizer: str | None = described(None, """
        A tokenizer (asset, folder or hub id) other than the model's own; null: the model's.""")
    dtype: Literal["fp32", "bf16"] = described("fp32", """
        fp32, or bf16 mixed precision: fp32 master weights and optimizer, forward and loss under
        torch.autocast(bfloat16); with LoRA the frozen base is stored in bf16 (the adapters stay fp32).""")
    gradient_checkpointing: bool = described(False, """
        Recompute activations in the backward pass instead of keeping them: less memory for more compute
        (turns off share_prompt's auto path).""")
    model_kwargs: dict[str, Any] = described(factory=dict, help="""
        Extra keyword arguments for the model's from_pretrained (e.g. attn_implementation); for the built-in
        demo model its size: layers, hidden, heads.""")
    device: str = described("auto", """
        auto, cpu, cuda or cuda:N; auto takes CUDA when available; torchrun ranks take cuda:LOCAL_RANK.""")
    lora: LoraConfig | None = described(None, """
        Train LoRA adapters (this section) instead of every weight; null: full fine-tuning.""")
    update_dropout: bool = described(False, """
        Dropout (the model's and LoRA's) during policy updates; off by default: the old log-probs are
        computed without it, so with it the ratio is not 1 on-policy and CTPO's cumulative ratio sums that
        noise.""")
    logprob_head: Literal["chunked", "full"] = described("chunked", """
        Log-probs of the sampled tokens: chunked (the LM head at response positions only, chunk by chunk,
        recomputed in backward: nothing of size [B, T, V] kept) or full (logits at every position, the old
        path).""")
    share_prompt: Literal["auto", "on", "off"] = described("auto", """
        One prompt forward per group: the G completions of a prompt run on its KV cache (gradient flows back
        through it); auto: where the run allows it (one process, no FSDP, no gradient checkpointing or
        update dropout, a model whose cache serves), else the per-row path and one log line; on: refuse a
        run that rules it out; off: every row forwards its prompt (docs/memory.md).""")

    def _check(self, p: str) -> None:
        require(bool(self.name_or_path), f"{p}.name_or_path", "a model asset name, folder or id", self.name_or_path)
        from toolgym.devices import check_device

        self.device = check_device(self.device, f"{p}.device")


@dataclass
class EvalConfig:
    """Periodic evaluation on held-out tasks: mean reward and tool-use rate, logged as eval/*."""

    every: int = described(20, """
        Evaluate every this many training steps; 0 disables periodic evaluation.""")
    tasks: int = described(100, """
        Held-out tasks per evaluation: task indices 0 to tasks-1 of eval.split, the same ones each time.""")
    split: str = described("test", """
        The split the evaluation tasks come from.""")
    env: str | None = described(None, """
        The environment to evaluate on; null: the training environments (rollout.env, or each of rollout.envs:
        eval.tasks tasks of each, logged per environment and overall).""")
    env_kwargs: dict[str, Any] = described(factory=dict, help="""
        Constructor keyword arguments for the evaluation environment; empty: rollout.env_kwargs (with
        rollout.envs, each environment's own).""")
    samples: int = described(1, """
        Samples per task; the reported reward is their mean (avg@k).""")
    temperature: float = described(0.7, """
        Sampling temperature of evaluation rollouts.""")
    top_p: float = described(1.0, """
        Nucleus sampling of evaluation rollouts (may be below 1: nothing is trained on them).""")
    at_start: bool = described(True, """
        Evaluate before the first step (the "before" of the before/after table).""")

    def _check(self, p: str) -> None:
        require(self.every >= 0, f"{p}.every", "an integer >= 0 (0 disables)", self.every)
        require(self.tasks >= 1, f"{p}.tasks", "an integer >= 1", self.tasks)
        require(self.samples >= 1, f"{p}.samples", "an integer >= 1", self.samples)
        require(self.temperature >= 0, f"{p}.temperature", "a number >= 0", self.temperature)
        require(0 < self.top_p <= 1, f"{p}.top_p", "a number in (0, 1]", self.top_p)


@dataclass
class CheckpointConfig:
    """Checkpoints in OUTPUT_DIR/checkpoints/step-NNNN, from which ``--resume`` continues exactly."""

    every: int = described(50, """
        Save a checkpoint every this many steps (and at the end); 0: only at the end.""")
    keep_last: int = described(2, """
        Checkpoints kept on disk; older ones are deleted as new ones are written.""")

    def _check(self, p: str) -> None:
        require(self.every >= 0, f"{p}.every", "an integer >= 0", self.every)
        require(self.keep_last >= 1, f"{p}.keep_last", "an integer >= 1", self.keep_last)


@dataclass
class LoggingConfig:
    """Where a run's metrics, plots and rollouts go."""

    jsonl: bool = described(True, """
        Append each logged step's metrics to OUTPUT_DIR/metrics.jsonl, one JSON object per line.""")
    tensorboard: bool = described(False, """
        Also write TensorBoard events to OUTPUT_DIR/tb (needs the tensorboard package).""")
    wandb: bool = described(False, """
        Also log to Weights & Biases (needs the wandb package and a login).""")
    wandb_project: str | None = described(None, """
        The Weights & Biases project; null: toolgym.""")
    progress: bool = described(True, """
        A progress bar with the latest metrics and an ETA on the console (main process only).""")
    plot: bool = described(True, """
        Write a PNG of the reward and eval curves to the output folder at the end.""")
    log_every: int = described(1, """
        Log metrics every this many steps (the last step is always logged).""")
    save_rollouts: bool = described(False, """
        Save each step's rollouts to OUTPUT_DIR/rollouts/step-NNNN.jsonl (+ .meta.json), for `toolgym
        rollouts view`.""")

    def _check(self, p: str) -> None:
        require(self.log_every >= 1, f"{p}.log_every", "an integer >= 1", self.log_every)


@dataclass
class SFTConfig:
    """Supervised warm start before RL: demonstrations from a JSONL file or generated by the env."""

    enabled: bool = described(False, """
        Run the supervised warm start before the first RL step.""")
    data: str | None = described(None, """
        A JSONL file of demonstrations to train on.""")
    demos: int = described(0, """
        Demonstrations to generate from the arithmetic demo task when no data file is given.""")
    epochs: int = described(1, """
        Passes over the demonstrations.""")
    lr: float = described(1e-5, """
        Learning rate of the warm start (AdamW; the RL updates use optimizer.lr).""")
    batch_size: int = described(8, """
        Demonstrations per warm-start optimizer step.""")
    max_seq_len: int = described(1024, """
        Each demonstration is cut to this many tokens (prompt included).""")
    tool_fraction: float = described(0.5, """
        Generated demonstrations: the share that use the tool (the rest answer directly).""")
    direct_correct: float = described(0.2, """
        Generated demonstrations: the share of direct answers that are right.""")

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

    address: str | None = described(None, """
        "host:port" of a running cluster (`ray start --head`); null or "local": start one here.""")
    num_workers: int = described(2, """
        Rollout-worker actors.""")
    cpus_per_worker: float = described(1.0, """
        Ray CPUs reserved per worker (also its torch threads).""")
    sandbox_pool: int = described(1, """
        Sandboxes each worker keeps warm (its node's tool capacity).""")
    max_in_flight: int = described(2, """
        Groups submitted to each worker at a time (back-pressure).""")
    num_cpus: int | None = described(None, """
        Local cluster only: the CPUs it advertises; null: the machine's.""")
    max_replacements: int = described(8, """
        Dead workers replaced per run before the run gives up.""")

    def _check(self, p: str) -> None:
        for name in ("num_workers", "sandbox_pool", "max_in_flight"):
            require(getattr(self, name) >= 1, f"{p}.{name}", "an integer >= 1", getattr(self, name))
        require(self.cpus_per_worker > 0, f"{p}.cpus_per_worker", "a number > 0", self.cpus_per_worker)
        require(self.num_cpus is None or self.num_cpus >= 1, f"{p}.num_cpus", "null or an integer >= 1", self.num_cpus)
        require(self.max_replacements >= 0, f"{p}.max_replacements", "an integer >= 0", self.max_replacements)


@dataclass
class TrainConfig:
    """One training run. ``mini_batches`` optimizer steps per rollout batch (the later ones are off-policy)."""

    algorithm: str = described("ctpo", """
        The training objective: a registered algorithm (ctpo, grpo, gspo, full_is, mopd, sdpo, opd, or a
        plug-in's). It sets the loss section's defaults and some top-level ones (listed at the end of this
        page); keys in the file override them.""")
    model: ModelConfig = described(factory=ModelConfig, help="""
        The policy: its weights, dtype, device and LoRA.""")
    rollout: RolloutConfig = described(factory=RolloutConfig, help="""
        How training rollouts are sampled: environment, group size, prompts per step, limits, sampler,
        sandbox.""")
    loss: LossConfig = described(factory=LossConfig, help="""
        The policy-gradient loss: importance ratio, clip, aggregation (defaults from algorithm).""")
    advantage: AdvantageConfig = described(factory=AdvantageConfig, help="""
        How a group's rewards become advantages.""")
    optimizer: OptimizerConfig = described(factory=OptimizerConfig, help="""
        AdamW and its learning-rate schedule for the RL updates.""")
    mini_batches: int = described(16, """
        Optimizer steps per rollout batch and epoch: the step's prompts are split into this many
        mini-batches of whole groups; the first is on-policy, the later ones are off-policy. Must divide
        rollout.prompts_per_step.""")
    update_epochs: int = described(1, """
        Passes over each step's rollout batch (each pass takes mini_batches optimizer steps).""")
    grad_accum: int = described(1, """
        Micro-batches per mini-batch (gradient accumulation): at most rows / grad_accum rows each; must
        divide the mini-batch's trajectories.""")
    max_tokens_per_micro_batch: int | None = described(None, """
        Padded tokens (rows x longest row) per micro-batch, rows bucketed by length; a longer row runs
        alone. null: no budget (grad_accum alone cuts). Also cuts the no-grad pass of the old log-probs.""")
    steps: int = described(305, """
        Training steps; each samples one rollout batch and updates on it. `--resume` continues a stopped run
        up to this step.""")
    seed: int = described(0, """
        Seeds torch, each step's task draws, the mini-batch shuffle, the evaluation tasks and generated
        demonstrations: the same seed and config repeat a run.""")
    output_dir: str = described("runs/toolgym", """
        The run's folder (a relative path is taken from the current folder): metrics.jsonl, checkpoints/,
        rollouts/, the resolved config and plots. A fresh run clears old metrics there; `--resume` continues
        from its latest checkpoint.""")
    eval: EvalConfig = described(factory=EvalConfig, help="""
        Periodic evaluation on held-out tasks.""")
    checkpoint: CheckpointConfig = described(factory=CheckpointConfig, help="""
        How often checkpoints are written and how many are kept.""")
    logging: LoggingConfig = described(factory=LoggingConfig, help="""
        Where metrics go (JSONL, TensorBoard, W&B), the progress bar, plots and saved rollouts.""")
    sft: SFTConfig = described(factory=SFTConfig, help="""
        An optional supervised warm start before RL.""")
    distributed: Literal["none", "ray"] = described("none", """
        none: rollouts in this process; ray: rollouts on Ray workers (see the ray section).""")
    ray: RayConfig = described(factory=RayConfig, help="""
        Ray workers, used with distributed: ray.""")
    options: Any = described(None, typed_by="algorithm", help="""
        The algorithm's own section, when it registered one: typed by that dataclass, built by the loader.""")

    @property
    def mismatch_weight_on(self) -> bool:
        """Whether each response's loss carries the sequence-level mismatch weight: ``loss.mismatch_weight``
        when set, else on exactly when ``rollout.max_staleness >= 1``. The one reader of that field, so a
        config built or ``dataclasses.replace``-d without the loader resolves null the same way."""
        if self.loss.mismatch_weight is None:
            return self.rollout.max_staleness >= 1
        return bool(self.loss.mismatch_weight)

    def env_ids(self) -> list[str]:
        """Every environment id the run builds (the training mixture, then eval.env), each once."""
        ids = [e.env for e in self.rollout.mixture()] + ([self.eval.env] if self.eval.env else [])
        return list(dict.fromkeys(ids))

    def uncorrected_staleness(self) -> str | None:
        """The warning line of a run that trains on stale rollouts without the mismatch weight (an explicit
        ``loss.mismatch_weight: false`` with ``rollout.max_staleness >= 1``: allowed, e.g. as an ablation);
        None otherwise."""
        if self.rollout.max_staleness >= 1 and not self.mismatch_weight_on:
            return (f"loss.mismatch_weight: false with rollout.max_staleness {self.rollout.max_staleness}: rollouts "
                    "up to that many updates old train without the correction of their sampler's gap "
                    "(docs/algorithms/ctpo.md, 'Training on stale rollouts'); leave it null to correct them")
        return None

    def _check_rollout_workers(self, spec: Any) -> None:
        """Who runs the episodes: worker processes or Ray actors hold a transformers replica (hf) or sample from
        servers (vllm_server); Ray starts the servers itself, and samples ahead only from servers."""
        r = self.rollout
        server = spec.pushes_while_sampling
        require(self.distributed != "ray" or spec.in_process or server, "rollout.sampler",
                "an in-process sampler ('hf') or a server sampler ('vllm_server') with distributed: ray (Ray "
                "workers run transformers replicas, or sample from servers that Ray actors start)", r.sampler)
        require(self.distributed != "ray" or not server or isinstance(r.servers, int), "rollout.servers",
                "a count with distributed: ray (each server is started by a Ray actor on its node)", r.servers)
        if r.workers or (r.max_staleness and not server):
            require(spec.in_process or server, "rollout.sampler",  # workers run a replica or a server client
                    "an in-process sampler ('hf') or a server sampler ('vllm_server') with rollout.workers, or with "
                    "rollout.max_staleness >= 1 a sampler that takes weights while it samples ('vllm_server')",
                    r.sampler)
        if r.workers:
            require(self.distributed == "none", "distributed",
                    "'none' with rollout.workers (with distributed: ray the rollout workers are ray.num_workers)",
                    self.distributed)
        if r.max_staleness and not server:
            require(self.distributed == "none", "distributed",  # Ray replicas take weights between steps only
                    "'none' with rollout.max_staleness and Ray workers that hold a model (with distributed: ray "
                    "only a server sampler, 'vllm_server', samples ahead of the update)", self.distributed)

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
        if len(self.rollout.envs) > 1 and self.eval.env is None and self.eval.env_kwargs:
            raise ConfigError("eval.env_kwargs: with rollout.envs each environment is evaluated with its own "
                              "env_kwargs; set eval.env to evaluate one environment with these instead")
        spec = self.rollout.sampler_spec()
        self._check_rollout_workers(spec)
        if self.mismatch_weight_on and not spec.logprobs:
            why = "" if self.loss.mismatch_weight else f" (null turns it on with rollout.max_staleness {self.rollout.max_staleness})"
            raise ConfigError(f"loss.mismatch_weight: must be false with sampler {self.rollout.sampler!r} (it returns no "
                              f"behaviour log-probs){why}; got {self.loss.mismatch_weight!r}")

