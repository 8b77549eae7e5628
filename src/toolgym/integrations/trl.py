"""toolgym inside TRL: CTPO (or toolgym's GRPO/GSPO) as the loss of ``GRPOTrainer``, environments as rewards.

People who already train with TRL keep their ``GRPOConfig``, datasets and launch scripts and change one line:

    from toolgym.integrations.trl import ToolgymGRPOTrainer, env_dataset, env_reward
    trainer = ToolgymGRPOTrainer(model, algorithm="ctpo", args=GRPOConfig(...),
                                 reward_funcs=env_reward("toolgym/Arith-v0"),
                                 train_dataset=env_dataset("toolgym/Arith-v0", 256))

The trainer keeps TRL's generation, rewards, advantages and optimizer; only the loss changes: it is
``toolgym.training.policy_gradient.losses.policy_loss`` with the algorithm's ratio, clip and aggregation (``args.loss_type`` and
``epsilon`` are then unused; an ``importance_sampling_level`` that disagrees with the algorithm's ratio is refused).
TRL's vLLM importance-sampling correction is honoured as configured: the loss takes the weight TRL computed
(``vllm_importance_sampling_mode``, its clip bounds, and TRL's rule that a NaN sampling log-prob gets no
correction). Multi-turn tool use goes
through TRL's ``environment_factory``: :func:`env_factory` exposes a toolgym environment's tools as methods of a
TRL environment, with the episode's sandbox state kept for the rubric.

The ratio is exactly 1 when each generation is used up inside one optimizer step (TRL's defaults:
``num_iterations=1``, ``steps_per_generation = gradient_accumulation_steps``); CTPO then equals GRPO, and the
trainer says so when it starts. ``num_iterations=2``, or ``steps_per_generation`` a multiple of
``gradient_accumulation_steps`` above it, gives off-policy updates where the ratio and the clip matter.
"""

from __future__ import annotations

import inspect
import json
import logging
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from trl import GRPOTrainer

from toolgym.sandbox import tenancy
from toolgym.training.policy_gradient.loss_presets import LOSS_PRESETS
from toolgym.training.policy_gradient.losses import AGGS, RATIOS, ClipConfig, policy_loss

__all__ = ["ToolgymLoss", "ToolgymGRPOTrainer", "env_dataset", "env_reward", "env_factory"]

# keyword arguments TRL's log-prob helper takes for multimodal batches (passed through unchanged)
_MM_KEYS = ("pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask", "spatial_shapes", "num_tiles",
            "image_sizes", "token_type_ids", "mm_token_type_ids", "image_position_ids")
logger = logging.getLogger(__name__)
_LOGGED = ("clip_frac", "clip_frac_high", "clip_frac_low", "clip_frac_dual", "approx_kl", "ratio_mean", "ratio_max")


@dataclass(frozen=True)
class ToolgymLoss:
    """Ratio, clip and aggregation of ``policy_loss`` (defaults: CTPO)."""

    ratio: str = LOSS_PRESETS["ctpo"]["ratio"]
    clip: ClipConfig | None = field(default_factory=ClipConfig.ctpo)
    agg: str = LOSS_PRESETS["ctpo"]["agg"]

    @classmethod
    def from_algorithm(cls, name: str) -> ToolgymLoss:
        """The loss of ``algorithm: NAME`` in a toolgym config: ``ctpo``, ``grpo`` or ``gspo`` (their default clips)."""
        presets = {k: LOSS_PRESETS[k] for k in ("ctpo", "grpo", "gspo")}  # written once, in loss_presets
        if name not in presets:
            raise ValueError(f"algorithm must be one of {', '.join(repr(a) for a in presets)} "
                             f"(or pass a ToolgymLoss); got {name!r}")
        p = presets[name]
        return cls(p["ratio"], ClipConfig.from_loss(p), p["agg"])

    def __post_init__(self) -> None:
        if self.ratio not in RATIOS:
            raise ValueError(f"ToolgymLoss.ratio must be one of {', '.join(repr(r) for r in RATIOS)}; got {self.ratio!r}")
        if self.agg not in AGGS:
            raise ValueError(f"ToolgymLoss.agg must be one of {', '.join(repr(a) for a in AGGS)}; got {self.agg!r}")


class ToolgymGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` whose policy loss is toolgym's ``policy_loss`` (CTPO by default).

    ``algorithm``: a name from :meth:`ToolgymLoss.from_algorithm` or a :class:`ToolgymLoss`. Every other
    argument is ``GRPOTrainer``'s. ``beta`` (KL to the reference model) is added as TRL adds it; with vLLM
    importance-sampling correction on, the rollout-vs-trainer weight is the one TRL computed
    (``importance_sampling_ratio``, from ``vllm_importance_sampling_mode``, its bounds and its NaN rule): sequence
    modes as ``policy_loss``'s ``seq_weight``, token modes as per-token advantage factors (a factor >= 0 scales a
    token's clipped term without moving its clip window).
    """

    def __init__(self, *args: Any, algorithm: str | ToolgymLoss = "ctpo", **kwargs: Any) -> None:
        if isinstance(algorithm, str):
            algorithm = ToolgymLoss.from_algorithm(algorithm)
        elif not isinstance(algorithm, ToolgymLoss):
            raise ValueError(f"algorithm must be an algorithm name or a ToolgymLoss; got {type(algorithm).__name__}")
        self.toolgym_loss = algorithm
        super().__init__(*args, **kwargs)
        unsupported = [name for name, on in (
            ("top_entropy_quantile < 1", self.top_entropy_quantile < 1.0),
            ("off_policy_mask_threshold", self.off_policy_mask_threshold is not None),
            ("entropy_coef / adaptive entropy", bool(getattr(self, "_entropy_bonus_enabled", False))),
        ) if on]
        if unsupported:
            raise ValueError(f"ToolgymGRPOTrainer does not support GRPOConfig option(s) {', '.join(unsupported)}; "
                             "unset them or use TRL's GRPOTrainer")
        level = getattr(self, "importance_sampling_level", "token")
        if level != "token" and algorithm.ratio not in ("gspo", "sequence"):
            raise ValueError(f"GRPOConfig.importance_sampling_level={level!r} chooses TRL's ratio, but the ratio here is "
                             f"the algorithm's ({algorithm.ratio!r}); leave it at 'token', or use algorithm='gspo' "
                             "for a sequence-level ratio")
        self._device_metrics: dict[str, list[torch.Tensor]] = {"train": [], "eval": []}
        self._device_keys: list[str] = []
        if ratio_is_one(self.args.gradient_accumulation_steps, self.args.steps_per_generation, self.num_iterations):
            logger.warning(
                f"ToolgymGRPOTrainer: every update is on-policy (gradient_accumulation_steps="
                f"{self.args.gradient_accumulation_steps}, steps_per_generation={self.args.steps_per_generation}, "
                f"num_iterations={self.num_iterations}): the ratio is exactly 1, so the clip never acts and "
                f"the {algorithm.ratio!r} ratio trains like GRPO; set num_iterations=2 (or steps_per_generation a "
                "larger multiple of gradient_accumulation_steps) for off-policy updates")

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> torch.Tensor:
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        logp, _, aux_loss = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=False,
            compute_aux_loss=self.aux_loss_enabled, **{k: inputs.get(k) for k in _MM_KEYS})
        loss = self.loss_from_logps(logp, inputs)
        if self.aux_loss_enabled:
            ga = self.current_gradient_accumulation_steps if self.model.training else 1
            loss = loss + self.router_aux_loss_coef * aux_loss / ga
        return loss

    def loss_from_logps(self, logp: torch.Tensor, inputs: dict[str, Any]) -> torch.Tensor:
        """The toolgym loss of one micro-batch from the policy's per-token log-probs ``[B, T]`` and TRL's batch.

        Token-mean divides by the policy tokens of the whole optimizer step on this process (from TRL's
        ``num_items_in_batch``), so accumulated micro-batches add up to one token mean; the seq-mean
        aggregations average the micro-batch and divide by the accumulation steps, as TRL's ``grpo`` does.
        Metrics stay on the device until TRL logs (:meth:`log`).
        """
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:  # multi-turn: tool output tokens are not the policy's
            mask = mask * inputs["tool_mask"]
        old = inputs.get("old_per_token_logps")
        old = logp.detach() if old is None else old  # TRL skips it when the batch is exactly on-policy
        advantages = inputs["advantages"]
        seq_weight = None
        weight = inputs.get("importance_sampling_ratio")  # TRL's vLLM correction, as configured ([B, 1] or [B, T])
        if weight is not None and self.use_vllm and self.vllm_importance_sampling_correction:
            weight = weight.detach()
            if weight.shape[-1] == 1 and mask.shape[-1] != 1:
                seq_weight = weight[:, 0]
            else:
                advantages = (advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages) * weight
        train = self.model.training
        ga = self.current_gradient_accumulation_steps if train else 1
        spec = self.toolgym_loss
        n_tokens = None
        if spec.agg == "token-mean" and inputs.get("num_items_in_batch") is not None:
            n_tokens = inputs["num_items_in_batch"].float().clamp(min=1.0) / self.accelerator.num_processes
            if train:
                n_tokens = n_tokens * ga / self.args.steps_per_generation
        loss, metrics = policy_loss(logp, old, advantages, mask, ratio=spec.ratio, clip=spec.clip,
                                    agg=spec.agg, seq_weight=seq_weight, global_token_count=n_tokens,
                                    metrics_on_device=True)
        if n_tokens is None:
            loss = loss / ga
        if self.beta != 0.0:
            ref = inputs["ref_per_token_logps"]
            kl = torch.exp(ref - logp) - (ref - logp) - 1
            denom = n_tokens if n_tokens is not None else mask.sum().clamp(min=1.0) * ga
            loss = loss + self.beta * (kl * mask).sum() / denom
        mode = "train" if train else "eval"
        keys = [k for k in (*_LOGGED, "tokens") if k in metrics]
        self._device_keys = keys
        self._device_metrics.setdefault(mode, []).append(torch.stack([metrics[k].detach().double() for k in keys]))
        return loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """TRL's logging, after one host read of the toolgym metrics gathered since the last log."""
        mode = "train" if self.model.training else "eval"
        rows = self._device_metrics.get(mode) or []
        if rows:
            for values in torch.stack([r.to(rows[-1].device) for r in rows]).tolist():
                read = dict(zip(self._device_keys, values, strict=True))
                if read.get("tokens", 1.0) <= 0:
                    continue  # a micro-batch without policy tokens has no ratio statistics
                for key in _LOGGED:
                    if key in read and math.isfinite(read[key]):
                        self._metrics[mode][f"toolgym/{key}"].append(read[key])
            rows.clear()
        super().log(logs, start_time)


def ratio_is_one(grad_accum: int, steps_per_generation: int, num_iterations: int) -> bool:
    """Whether TRL uses each generation up inside one optimizer step, so every update is on-policy (ratio 1)."""
    return grad_accum % (steps_per_generation * num_iterations) == 0


# ---------------------------------------------------------------- environments as reward functions


def _make_env(env: Any, kwargs: dict[str, Any]) -> Any:
    if isinstance(env, str):
        from toolgym.envs.registry import make_env

        return make_env(env, kwargs)
    if kwargs:
        raise ValueError("environment keyword arguments apply to an environment id, not to an environment instance")
    return env


def _single_turn(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Single-turn scoring: the completion is the final turn, so tool calls in it are not executed."""
    return {"max_turns": 1, "parser": "none", **kwargs}


def env_dataset(env: Any, n: int = 0, *, indices: Sequence[int] | None = None, seed: int = 0, single_turn: bool = True,
                **env_kwargs: Any) -> Any:
    """A ``datasets.Dataset`` of tasks from a toolgym environment: ``prompt`` (chat messages) and ``task``.

    ``task`` is the toolgym task as JSON; TRL hands it to :func:`env_reward` (and to ``reset`` of
    :func:`env_factory`'s environments). Tasks ``0..n-1`` of the env's source, or the given ``indices``.
    """
    from datasets import Dataset

    idx = list(range(n)) if indices is None else [int(i) for i in indices]
    if not idx:
        raise ValueError(f"env_dataset needs n >= 1 or a non-empty indices list; got n={n}, indices={indices!r}")
    e = _make_env(env, _single_turn(env_kwargs) if single_turn and isinstance(env, str) else env_kwargs)
    prompts, tasks = [], []
    try:
        for i in idx:
            obs, _ = e.reset(seed=seed + i, options={"index": i})
            prompts.append(obs)
            tasks.append(json.dumps(e.unwrapped.task.to_dict()))
    finally:
        if isinstance(env, str):
            e.close()
    return Dataset.from_dict({"prompt": prompts, "task": tasks})


def _final_text(completion: Any) -> str:
    """The last assistant message of a conversational completion, or a plain-text completion."""
    if isinstance(completion, str):
        return completion
    for msg in reversed(completion):
        if msg.get("role") == "assistant":
            content = msg.get("content") or ""
            return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)
    return ""


def _reward_name(env: Any) -> str:
    raw = env if isinstance(env, str) else type(getattr(env, "unwrapped", env)).__name__
    return "toolgym_" + re.sub(r"[^A-Za-z0-9]+", "_", raw.split("/")[-1]).strip("_").lower()


def env_reward(env: Any, **env_kwargs: Any) -> Callable[..., list[float]]:
    """A TRL reward function ``(prompts, completions, task, **kwargs) -> list[float]`` scored by a toolgym env.

    Each completion is played as the final turn of the row's task (``task`` column from
    :func:`env_dataset`), so the reward is exactly the env's verifier/rubric total. ``env`` is an id (made
    with ``max_turns=1, parser="none"`` unless ``env_kwargs`` say otherwise) or an env instance. With
    :func:`env_factory` environments the episode's own state (sandbox, messages) is scored instead.
    """
    holder: dict[str, Any] = {}

    def reward(prompts: Sequence[Any], completions: Sequence[Any], task: Sequence[str] | None = None,
               environments: Sequence[Any] | None = None, **kwargs: Any) -> list[float]:
        if task is None:
            raise ValueError("the dataset has no 'task' column; build it with toolgym.integrations.trl.env_dataset")
        out = []
        for i, (completion, t) in enumerate(zip(completions, task, strict=True)):
            text = _final_text(completion)
            if environments is not None and isinstance(environments[i], TRLEnv):
                out.append(environments[i]._score(text))
                continue
            if "env" not in holder:
                holder["env"] = _make_env(env, _single_turn(env_kwargs) if isinstance(env, str) else env_kwargs)
            e = holder["env"]
            e.reset(options={"task": json.loads(t)})
            _, r, _, _, _ = e.step(text)
            out.append(float(r))
        return out

    reward.__name__ = _reward_name(env)
    return reward


# ---------------------------------------------------------------- multi-turn: TRL's environment_factory


class TRLEnv:
    """A toolgym environment seen through TRL's ``environment_factory`` protocol (one instance per rollout).

    ``reset(task=...)`` starts the episode on the dataset row's task; each toolgym tool is a public method
    (built by :func:`env_factory` from the tool's JSON schema) that runs in the episode's context, so
    stateful tools and the sandbox behave as in toolgym's own rollouts. Scoring happens in
    :func:`env_reward`, which sees the model's final message (TRL does not give it to the environment).
    """

    def __init__(self, env: Any) -> None:
        self.env = env
        self.messages: list[dict[str, Any]] = []
        self.episode: tenancy.Episode | None = None

    def reset(self, task: str | None = None, **kwargs: Any) -> None:
        if task is None:
            raise ValueError("the dataset has no 'task' column; build it with toolgym.integrations.trl.env_dataset")
        # each rollout is an episode of its task, as in toolgym's own runner: its sandbox calls never share a
        # sandbox lifetime with another rollout of the task (toolgym.sandbox.tenancy)
        self.episode = tenancy.new_episode({"env": getattr(self.env.spec, "id", None), "task": task})
        with tenancy.within(self.episode):
            obs, _ = self.env.reset(options={"task": json.loads(task)})
        self.messages = list(obs)
        return None  # the prompt is already in the dataset row

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        inner = self.env.unwrapped
        with tenancy.within(self.episode):
            content, _ = inner._run(inner.tools[name].acall(arguments, inner._ctx))
        self.messages.append({"role": "tool", "name": name, "content": content})
        return content

    def _score(self, completion: str) -> float:
        """The rubric total for the final message, with this episode's tool state (private: TRL offers every
        public method of an environment to the model as a tool)."""
        inner = self.env.unwrapped
        parsed = inner.parser.parse(completion, max(1, len(self.messages)))
        msgs = [*self.messages, {"role": "assistant", "content": completion}]
        with tenancy.within(self.episode):
            result = inner._run(inner.rubric.ascore(completion=completion, answer=parsed.answer, task=inner.task,
                                                    messages=msgs, state=inner._ctx.state))
            inner._run(inner._aclose_episode())
        return float(result.total)


_JSON_TO_PY = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}


def _tool_method(schema: dict[str, Any]) -> Callable[..., str]:
    """A method whose signature and Google-style docstring reproduce a toolgym tool's JSON schema."""
    fn = schema["function"]
    name = fn["name"]
    props = fn.get("parameters", {}).get("properties", {})
    required = set(fn.get("parameters", {}).get("required", []))

    def method(self: TRLEnv, **arguments: Any) -> str:
        return self._call(name, arguments)

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {"return": str}
    doc_args = []
    for pname, p in props.items():
        typ = _JSON_TO_PY.get(p.get("type", "string"), str)
        default = inspect.Parameter.empty if pname in required else None
        params.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=typ))
        annotations[pname] = typ if pname in required else typ | None
        doc_args.append(f"    {pname}: {p.get('description', pname)}")
    method.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    method.__name__ = method.__qualname__ = name
    desc = fn.get("description") or name
    method.__doc__ = desc + ("\n\nArgs:\n" + "\n".join(doc_args) if doc_args else "") + "\n\nReturns:\n    The tool's output."
    return method


def env_factory(env_id: str, **env_kwargs: Any) -> Callable[[], TRLEnv]:
    """An ``environment_factory`` for ``GRPOTrainer``: multi-turn tool use in a toolgym environment.

    Pair it with :func:`env_reward` (same id and kwargs) for the reward and ``env_dataset(...,
    single_turn=False)`` for the prompts. TRL needs a chat template that renders tool calls.
    """
    from toolgym.envs.registry import make_env

    probe = make_env(env_id, env_kwargs)
    try:
        schemas = list(probe.unwrapped.tool_schemas)
    finally:
        probe.close()
    if not schemas:
        raise ValueError(f"{env_id} has no tools; use env_dataset + env_reward for single-turn training")
    methods = {s["function"]["name"]: _tool_method(s) for s in schemas}
    cls = type(f"TRLEnv_{_reward_name(env_id)}", (TRLEnv,), methods)

    def factory() -> TRLEnv:
        return cls(make_env(env_id, env_kwargs))

    return factory
