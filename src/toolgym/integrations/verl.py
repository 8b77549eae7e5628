"""toolgym inside verl: CTPO (and toolgym's GRPO/GSPO) as verl policy losses; the sandbox judge and the math
verifier as a verl reward function.

Importing this module registers three losses in verl's policy-loss registry (``core_algos.register_policy_loss``):

    ctpo           cumulative prefix ratio, position-adaptive clip (ClipConfig.ctpo())
    toolgym_grpo   per-token ratio, window [0.8, 1.2], dual clip 3 (ClipConfig.grpo())
    toolgym_gspo   length-normalised sequence ratio, window [1-3e-4, 1+4e-4] (ClipConfig.gspo())

verl imports it in every worker by itself: toolgym declares it as a ``verl.plugins`` entry point (or set
``VERL_USE_EXTERNAL_MODULES=toolgym.integrations.verl``). Select one with
``actor_rollout_ref.actor.policy_loss.loss_mode=ctpo``. The value is ``toolgym.training.policy_gradient.losses.policy_loss``;
verl's ``loss_agg_mode`` and its global batch counts choose the aggregation, verl's ``clip_ratio*`` keys are not
read (the clip is the algorithm's). Reward: ``reward.custom_reward_function.path=pkg://toolgym.integrations.verl``
(name ``compute_score``) judges code in a sandbox and math with ``math_equal``; see :func:`compute_score`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import torch
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, register_policy_loss

from toolgym.training.policy_gradient.loss_presets import LOSS_PRESETS
from toolgym.training.policy_gradient.losses import RATIOS, ClipConfig, policy_loss

__all__ = ["LOSSES", "register_loss", "compute_score", "code_score", "math_score", "set_reward_sandbox"]

VERL_AGGS = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def _aggregation(mode: str, mask: torch.Tensor, info: dict[str, Any]) -> tuple[str, dict[str, Any], int]:
    """toolgym's aggregation, global count and factor that give verl's ``agg_loss(mode, **global_batch_info)``.

    verl divides a micro-batch's sum by the global token/sequence count and multiplies by ``dp_size`` (the
    gradient all-reduce averages over ranks): the same count here, and the factor ``dp_size``. ``token-sum`` is a
    token mean over a count of 1; ``seq-mean-token-sum-norm`` is ``seq-mean-token-sum`` with the sequence count
    multiplied by ``loss_scale_factor`` (default: the padded response length).
    """
    if mode not in VERL_AGGS:
        raise ValueError(f"loss_agg_mode must be one of {', '.join(repr(a) for a in VERL_AGGS)}; got {mode!r}")
    dp = int(info.get("dp_size") or 1)
    if mode in ("token-mean", "token-sum"):
        n = info.get("batch_num_tokens") if mode == "token-mean" else 1
        if n is None and dp > 1:
            raise ValueError("verl's global_batch_info needs batch_num_tokens when dp_size > 1")
        return "token-mean", {} if n is None else {"global_token_count": n}, dp
    n_seq = info.get("global_batch_size")
    if n_seq is None and dp > 1:
        raise ValueError("verl's global_batch_info needs global_batch_size when dp_size > 1")
    if mode == "seq-mean-token-mean":
        return mode, {} if n_seq is None else {"global_seq_count": n_seq}, dp
    if mode == "seq-mean-token-sum-norm":
        if n_seq is None:
            n_seq = ((mask != 0).sum(dim=-1) > 0).sum()
        scale = info.get("loss_scale_factor")
        n_seq = n_seq * (mask.shape[-1] if scale is None else scale)
    return "seq-mean-token-sum", {} if n_seq is None else {"global_seq_count": n_seq}, dp


def _seq_weight(weights: torch.Tensor | None, mask: torch.Tensor) -> torch.Tensor | None:
    """verl's rollout-correction weights ``[B, T]`` as toolgym's per-sequence weight (they must be per sequence)."""
    if weights is None:
        return None
    m = mask != 0
    w = weights.detach().float()
    first = torch.where(m, w, float("-inf")).amax(dim=-1)
    last = torch.where(m, w, float("inf")).amin(dim=-1)
    rows = m.any(dim=-1)
    if not torch.allclose(first[rows], last[rows], rtol=1e-5, atol=1e-6):
        raise ValueError("toolgym's losses take one rollout-correction weight per sequence; "
                         "set algorithm.rollout_correction.rollout_is=sequence (or null)")
    return torch.where(rows, first, 1.0)


def _loss_fn(ratio: str, clip: ClipConfig | None) -> Callable[..., tuple[torch.Tensor, dict[str, Any]]]:
    def loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
             response_mask: torch.Tensor, loss_agg_mode: str = "token-mean", config: Any = None,
             rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
        info = dict(getattr(config, "global_batch_info", None) or {})
        if info.get("loss_scale_factor") is None:  # verl's trainer copies it there; direct callers may not
            info["loss_scale_factor"] = getattr(config, "loss_scale_factor", None)
        agg, counts, factor = _aggregation(loss_agg_mode, response_mask, info)
        # metrics as numbers, read from the device in one go: verl takes numbers here (its own losses call .item())
        value, m = policy_loss(log_prob, old_log_prob, advantages, response_mask, ratio=ratio, clip=clip, agg=agg,
                               seq_weight=_seq_weight(rollout_is_weights, response_mask), **counts)
        metrics = {"actor/pg_clipfrac": m["clip_frac_high"] + m["clip_frac_low"], "actor/ppo_kl": m["approx_kl"],
                   "actor/pg_clipfrac_lower": m["clip_frac_dual"]}
        metrics.update({f"toolgym/{k}": m[k] for k in ("clip_frac_high", "clip_frac_low", "ratio_mean", "ratio_max")
                        if k in m})
        return value * factor if factor != 1 else value, metrics

    loss.__doc__ = f"toolgym policy_loss(ratio={ratio!r}, clip={clip}) in verl's policy-loss signature."
    return loss


def register_loss(name: str, ratio: str, clip: ClipConfig | None) -> Callable[..., Any]:
    """Register ``policy_loss`` with this ratio and clip as verl loss ``name`` (for clips other than the presets)."""
    if ratio not in RATIOS:
        raise ValueError(f"ratio must be one of {', '.join(repr(r) for r in RATIOS)}; got {ratio!r}")
    if name in POLICY_LOSS_REGISTRY and not getattr(POLICY_LOSS_REGISTRY[name], "_toolgym", False):
        raise ValueError(f"verl already has a policy loss named {name!r}; choose another name")
    fn = _loss_fn(ratio, clip)
    fn._toolgym = True  # type: ignore[attr-defined]
    return register_policy_loss(name)(fn)


# the presets' ratio and clip, written once in toolgym.training.policy_gradient.loss_presets
LOSSES: dict[str, Callable[..., Any]] = {
    name: register_loss(name, LOSS_PRESETS[algo]["ratio"], ClipConfig.from_loss(LOSS_PRESETS[algo]))
    for name, algo in (("ctpo", "ctpo"), ("toolgym_grpo", "grpo"), ("toolgym_gspo", "gspo"))
}


# ---------------------------------------------------------------- reward function

_SANDBOXES: dict[str, Any] = {}
_SANDBOX_LOCK = threading.Lock()


def set_reward_sandbox(sb: Any, backend: str = "auto") -> None:
    """Use this open sandbox for code rewards asking for ``backend``; ``None``: open one on first use (the default,
    ``open_sandbox(backend)`` with ``TOOLGYM_POOL_SIZE`` workers, by default one per core)."""
    with _SANDBOX_LOCK:
        _SANDBOXES[backend] = sb


def _sandbox(backend: str) -> Any:
    with _SANDBOX_LOCK:
        sb = _SANDBOXES.get(backend)
        if sb is None:  # one pool per process, shared by verl's reward threads; closed at exit
            from toolgym.sandbox import Limits, open_sandbox

            sb = _SANDBOXES[backend] = open_sandbox(backend, Limits(timeout_s=60, memory_mb=1024))
        return sb


def _code_spec(ground_truth: Any) -> dict[str, Any] | None:
    """The tests of a code ground truth (JSON text or object), or None when it is not one."""
    gt = ground_truth
    if isinstance(gt, str):
        try:
            gt = json.loads(gt)
        except ValueError:
            return None
    if isinstance(gt, list):
        gt = {"tests": gt}
    if not isinstance(gt, dict):
        return None
    if "inputs" in gt and "outputs" in gt:  # the APPS/TACO stdio convention
        if len(gt["inputs"]) != len(gt["outputs"]):
            raise ValueError(f"code ground truth has {len(gt['inputs'])} inputs but {len(gt['outputs'])} outputs")
        tests = [{"input": i, "output": o} for i, o in zip(gt["inputs"], gt["outputs"], strict=True)]
        return {**{k: v for k, v in gt.items() if k not in ("inputs", "outputs")}, "tests": tests, "mode": "stdio"}
    if "tests" in gt and isinstance(gt["tests"], list) and gt["tests"]:
        mode = gt.get("mode") or ("stdio" if isinstance(gt["tests"][0], dict) and "input" in gt["tests"][0]
                                  else "function")
        return {**gt, "mode": mode}
    return None


def code_score(solution_str: str, tests: dict[str, Any], *, sandbox_backend: str = "auto",
               partial_credit: bool = False) -> float:
    """Judge the last fenced program of ``solution_str`` on ``tests`` (see :func:`compute_score`): 1.0 when every
    test passes (``partial_credit``: the fraction passed)."""
    from toolgym.envs.tasks.code_task import extract_program
    from toolgym.sandbox.judging import judge

    language = tests.get("language", "python")
    program = extract_program(solution_str or "")  # outside <think>
    if not program.strip():
        return 0.0
    opts = {k: tests[k] for k in ("checker", "time_limit_s", "memory_mb", "abs_tol", "rel_tol") if k in tests}
    report = judge(_sandbox(sandbox_backend), program, tests["tests"], tests["mode"], language=language, **opts)
    return report.fraction if partial_credit else report.all_or_nothing


def math_score(solution_str: str, ground_truth: Any) -> float:
    """1.0 when the model's final answer (boxed, or after "Answer:") equals ``ground_truth`` (``math_equal``)."""
    from toolgym.envs.verifiers import math_equal

    return 1.0 if math_equal(solution_str, ground_truth) else 0.0


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None,
                  *, sandbox_backend: str = "auto", partial_credit: bool = False, **_: Any) -> float:
    """verl's custom reward function: code is judged in a toolgym sandbox, anything else checked as math.

    A ground truth (text or JSON text) is code when it holds tests: ``{"inputs": [...], "outputs": [...]}``
    (stdin/stdout, the APPS/TACO convention) or ``{"tests": [...]}`` / a list of ``toolgym.sandbox.TestCase``
    fields (``{"input", "output"}`` for stdio, ``{"code": "assert ..."}`` or ``{"call", "args", "expected"}`` for
    function mode), with optional ``language`` ("python"/"cpp"), ``checker``, ``time_limit_s``, ``memory_mb``.
    ``sandbox_backend`` and ``partial_credit`` come from ``reward.custom_reward_function.reward_kwargs``.
    ``data_source`` and ``extra_info`` are not read.
    """
    tests = _code_spec(ground_truth)
    if tests is not None:
        return code_score(solution_str, tests, sandbox_backend=sandbox_backend, partial_credit=partial_credit)
    return math_score(solution_str, ground_truth)
