"""The ``options:`` section of ``algorithm: mopd | sdpo | opd`` (docs/algorithms/mopd.md), torch-free.

One dataclass per algorithm so that a dumped config shows the values a run really used:
SDPO differs from MOPD only in its context (1 success); OPD is standard on-policy
distillation (no peer context, sampled-token reverse KL, a frozen separate teacher).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from toolgym.errors import ConfigError


@dataclass
class MOPDOptions:
    mode: Literal["positive", "contrastive", "sdpo"] = "contrastive"  # which peers the teacher sees
    context: Literal["peers", "none"] = "peers"  # none: the teacher scores the student's own prompt
    divergence: Literal["jsd", "topk", "sampled_rkl"] = "jsd"  # topk: the same JSD(alpha) over the top-k as jsd
    k: int = 100
    alpha: float = 0.5  # JSD interpolation (0: forward KL, 1: reverse KL), for jsd and topk alike
    tail: bool = True  # the probability mass outside the top-k as one extra bucket
    threshold: float = 0.5  # a rollout with reward >= threshold is a success
    use_feedback: bool = True  # show a rollout's own verifier feedback (trajectory metadata "feedback")
    ema_rate: float = 0.05  # teacher <- (1 - rate) teacher + rate student after each step; 0: frozen
    teacher: str | None = None  # null: an EMA copy of the student; else a model (asset, folder) kept frozen
    max_teacher_tokens: int = 10240  # teacher prompt limit (peers are truncated first)
    ratio_cap: float = 2.0  # IS ratio cap, off-policy mini-batches only (rho = 1 on-policy)
    token_mismatch_weight: bool = False  # token-level engine/trainer mismatch weight
    weight_cap: float = 2.0
    agg: Literal["seq-mean-token-mean", "token-mean"] = "seq-mean-token-mean"
    rl_coef: float = 0.0  # toolgym's extension: add rl_coef x the policy-gradient loss of the ``loss:`` section
    teacher_micro_batch: int = 0  # rows per teacher forward; 0: the whole micro-batch

    def _check(self, p: str) -> None:
        def need(ok: bool, name: str, allowed: str) -> None:
            if not ok:
                raise ConfigError(f"{p}.{name}: must be {allowed}; got {getattr(self, name)!r}")

        need(self.k >= 1, "k", "an integer >= 1")
        need(0.0 <= self.alpha <= 1.0, "alpha", "a number in [0, 1]")
        need(0.0 <= self.ema_rate <= 1.0, "ema_rate", "a number in [0, 1] (0 keeps the teacher frozen)")
        need(self.max_teacher_tokens >= 64, "max_teacher_tokens", "an integer >= 64")
        need(self.ratio_cap >= 1.0, "ratio_cap", "a number >= 1")
        need(self.weight_cap >= 1.0, "weight_cap", "a number >= 1")
        need(self.rl_coef >= 0.0, "rl_coef", "a number >= 0")
        need(self.teacher_micro_batch >= 0, "teacher_micro_batch", "an integer >= 0")
        need(not (self.context == "none" and self.teacher is None), "teacher",
             "a separate teacher model with context 'none' (an unconditioned copy of the student "
             "has nothing to distil)")


@dataclass
class SDPOOptions(MOPDOptions):
    mode: Literal["positive", "contrastive", "sdpo"] = "sdpo"


@dataclass
class OPDOptions(MOPDOptions):
    context: Literal["peers", "none"] = "none"
    divergence: Literal["jsd", "topk", "sampled_rkl"] = "sampled_rkl"
    ema_rate: float = 0.0
    use_feedback: bool = False
