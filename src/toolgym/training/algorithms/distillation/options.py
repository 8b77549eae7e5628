"""The ``options:`` section of ``algorithm: mopd | sdpo | opd`` (docs/algorithms/mopd.md), torch-free.

One dataclass per algorithm so that a dumped config shows the values a run really used:
SDPO differs from MOPD only in its context (1 success); OPD is standard on-policy
distillation (no peer context, sampled-token reverse KL, a frozen separate teacher).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from toolgym.errors import ConfigError
from toolgym.training.config_schema import described

if TYPE_CHECKING:
    from toolgym.training.config_schema import TrainConfig


@dataclass
class MOPDOptions:
    """Multi-peer on-policy distillation: which peers the teacher sees, the divergence, the teacher itself."""

    mode: Literal["positive", "contrastive", "sdpo"] = described("contrastive", """
        Which peers the teacher sees: contrastive (up to two other successes and one failure), positive (up
        to two other successes) or sdpo (the first other success).""")
    context: Literal["peers", "none"] = described("peers", """
        peers: the teacher scores the student's response with its peers in the prompt; none: the teacher
        scores the student's own prompt.""")
    divergence: Literal["jsd", "topk", "sampled_rkl"] = described("jsd", """
        jsd: JSD(alpha) over the whole vocabulary; topk: the same JSD over the student's top-k tokens;
        sampled_rkl: reverse KL at the sampled token.""")
    k: int = described(100, """
        Tokens kept by divergence topk (the student's k most likely).""")
    alpha: float = described(0.5, """
        JSD interpolation (0: forward KL, 1: reverse KL), for jsd and topk alike.""")
    tail: bool = described(True, """
        topk: the probability mass outside the top-k as one extra bucket.""")
    threshold: float = described(0.5, """
        A rollout with reward >= threshold counts as a success.""")
    use_feedback: bool = described(True, """
        Show the teacher a rollout's own verifier feedback (trajectory metadata "feedback").""")
    ema_rate: float = described(0.05, """
        teacher <- (1 - rate) teacher + rate student after each step; 0: the teacher stays frozen.""")
    teacher: str | None = described(None, """
        null: an EMA copy of the student; else a model (asset, folder) kept frozen.""")
    max_teacher_tokens: int = described(10240, """
        Teacher prompt limit in tokens (peers are truncated first).""")
    ratio_cap: float = described(2.0, """
        Cap of the importance ratio on off-policy mini-batches (the ratio is 1 on-policy).""")
    token_mismatch_weight: bool = described(False, """
        Weight each token by min(exp(trainer log-prob - sampler log-prob), weight_cap) (engine/trainer
        mismatch); not with loss.mismatch_weight on or rollout.max_staleness >= 1, where the sequence-level
        weight is the one correction (docs/algorithms/mopd.md).""")
    weight_cap: float = described(2.0, """
        Cap of that token mismatch weight (used with token_mismatch_weight).""")
    agg: Literal["seq-mean-token-mean", "token-mean"] = described("seq-mean-token-mean", """
        How token losses are averaged: seq-mean-token-mean (per response, then over responses) or token-mean
        (over all tokens).""")
    rl_coef: float = described(0.0, """
        toolgym's extension: add rl_coef x the policy-gradient loss of the loss section.""")
    teacher_micro_batch: int = described(0, """
        Rows per teacher forward pass; 0: the whole micro-batch.""")

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

    def _check_run(self, cfg: TrainConfig, p: str) -> None:
        """Rules against the rest of the run's config: the sampler-vs-trainer gap is corrected once. With the
        sequence-level ``loss.mismatch_weight`` on, or rollouts up to ``rollout.max_staleness`` updates old,
        that weight is the only place the sampler's log-probs enter (docs/algorithms/mopd.md)."""
        if not self.token_mismatch_weight:
            return
        if cfg.mismatch_weight_on:
            why = "loss.mismatch_weight is on" if cfg.loss.mismatch_weight else \
                f"loss.mismatch_weight is on (null, with rollout.max_staleness {cfg.rollout.max_staleness})"
            raise ConfigError(f"{p}.token_mismatch_weight: must be false when {why}: both correct the gap between "
                              "the sampler and the trainer, so it would count twice; keep the sequence-level weight")
        if cfg.rollout.max_staleness >= 1:
            raise ConfigError(f"{p}.token_mismatch_weight: must be false with rollout.max_staleness "
                              f"{cfg.rollout.max_staleness}: stale rollouts are corrected by the sequence-level "
                              "loss.mismatch_weight only (leave it null, or false for no correction)")


@dataclass
class SDPOOptions(MOPDOptions):
    mode: Literal["positive", "contrastive", "sdpo"] = "sdpo"


@dataclass
class OPDOptions(MOPDOptions):
    context: Literal["peers", "none"] = "none"
    divergence: Literal["jsd", "topk", "sampled_rkl"] = "sampled_rkl"
    ema_rate: float = 0.0
    use_feedback: bool = False
