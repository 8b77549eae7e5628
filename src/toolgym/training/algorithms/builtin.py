"""The built-in algorithms' registrations (their defaults: docs/algorithms/ctpo.md, baselines.md, mopd.md)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from toolgym.training.algorithms.distillation.options import MOPDOptions, OPDOptions, SDPOOptions
from toolgym.training.algorithms.registry import register_algorithm
from toolgym.training.config import LossConfig

if TYPE_CHECKING:
    from toolgym.training.algorithms.base import Objective
    from toolgym.training.config import TrainConfig


def policy_gradient(cfg: TrainConfig) -> Objective:
    from toolgym.training.algorithms.policy_gradient import PolicyGradient

    return PolicyGradient(cfg)


def distillation(cfg: TrainConfig) -> Objective:
    from toolgym.training.algorithms.distillation.objective import DistillationObjective

    return DistillationObjective(cfg)


# CTPO's loss is LossConfig's defaults, written once there
CTPO_LOSS = {k: getattr(LossConfig(), k) for k in ("ratio", "clip_mode", "eps_low", "eps_high", "power", "dual", "agg")}

register_algorithm("ctpo", {"loss": CTPO_LOSS}, None, policy_gradient,
                   description="cumulative prefix ratio, sqrt(t)-adaptive log-space clip (docs/algorithms/ctpo.md)")
register_algorithm("grpo", {"loss": dict(ratio="token", clip_mode="fixed", eps_low=0.2, eps_high=0.2, power=0.0,
                                         dual=3.0, agg="token-mean")}, None, policy_gradient,
                   description="token ratio, ratio window [0.8, 1.2], dual clip 3")
register_algorithm("gspo", {"loss": dict(ratio="gspo", clip_mode="fixed", eps_low=3e-4, eps_high=4e-4, power=0.0,
                                         dual=None, agg="seq-mean-token-mean")}, None, policy_gradient,
                   description="sequence geometric-mean ratio, window [1-3e-4, 1+4e-4], no dual clip")
# Full IS is analysed, not trained, in the paper; its clip is toolgym's choice: a uniform log-space
# window mirroring GRPO's ratio-space one ([log 0.8, log 1.2] ~ ±0.2), dual clip at log 3.
register_algorithm("full_is", {"loss": dict(ratio="sequence", clip_mode="adaptive", eps_low=0.2, eps_high=0.2,
                                            power=0.0, dual=math.log(3.0), agg="token-mean")}, None, policy_gradient,
                   description="full-sequence ratio on every token, uniform log-space clip ±0.2, dual log 3")
# Distillation. Their ``loss:`` section is the policy-gradient term that ``options.rl_coef`` adds
# (toolgym's extension; the authors train on the distillation loss alone, rl_coef = 0).
# One mini-batch per rollout batch, one epoch: on-policy, rho = 1 (docs/algorithms/mopd.md, "Defaults").
_DISTILL = {"loss": CTPO_LOSS, "mini_batches": 1, "update_epochs": 1}
register_algorithm("mopd", _DISTILL, MOPDOptions, distillation,
                   description="EMA self-teacher conditioned on 2 peer successes + 1 failure, top-100+tail JSD")
register_algorithm("sdpo", _DISTILL, SDPOOptions, distillation,
                   description="MOPD's machinery with the 1-success context")
register_algorithm("opd", _DISTILL, OPDOptions, distillation,
                   description="on-policy distillation from a frozen separate teacher, sampled-token reverse KL")
