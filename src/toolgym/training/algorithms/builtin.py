"""The built-in algorithms' registrations (their defaults: docs/algorithms/ctpo.md, baselines.md, mopd.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolgym.training.algorithms.distillation.options import MOPDOptions, OPDOptions, SDPOOptions
from toolgym.training.algorithms.registry import register_algorithm
from toolgym.training.policy_gradient.loss_presets import CTPO, FULL_IS, GRPO, GSPO

if TYPE_CHECKING:
    from toolgym.training.algorithms.base import Objective
    from toolgym.training.config_schema import TrainConfig


def policy_gradient(cfg: TrainConfig) -> Objective:
    from toolgym.training.algorithms.policy_gradient import PolicyGradient

    return PolicyGradient(cfg)


def distillation(cfg: TrainConfig) -> Objective:
    from toolgym.training.algorithms.distillation.objective import DistillationObjective

    return DistillationObjective(cfg)


# the loss presets are written once, in toolgym.training.policy_gradient.loss_presets (CTPO's: LossConfig's defaults)
register_algorithm("ctpo", {"loss": CTPO}, None, policy_gradient,
                   description="cumulative prefix ratio, sqrt(t)-adaptive log-space clip (docs/algorithms/ctpo.md)")
register_algorithm("grpo", {"loss": GRPO}, None, policy_gradient,
                   description="token ratio, ratio window [0.8, 1.2], dual clip 3")
register_algorithm("gspo", {"loss": GSPO}, None, policy_gradient,
                   description="sequence geometric-mean ratio, window [1-3e-4, 1+4e-4], no dual clip")
register_algorithm("full_is", {"loss": FULL_IS}, None, policy_gradient,
                   description="full-sequence ratio on every token, uniform log-space clip ±0.2, dual log 3")
# Distillation. Their ``loss:`` section is the policy-gradient term that ``options.rl_coef`` adds
# (toolgym's extension; the authors train on the distillation loss alone, rl_coef = 0).
# One mini-batch per rollout batch, one epoch: on-policy, rho = 1 (docs/algorithms/mopd.md, "Defaults").
_DISTILL = {"loss": CTPO, "mini_batches": 1, "update_epochs": 1}
register_algorithm("mopd", _DISTILL, MOPDOptions, distillation,
                   description="EMA self-teacher conditioned on 2 peer successes + 1 failure, top-100+tail JSD")
register_algorithm("sdpo", _DISTILL, SDPOOptions, distillation,
                   description="MOPD's machinery with the 1-success context")
register_algorithm("opd", _DISTILL, OPDOptions, distillation,
                   description="on-policy distillation from a frozen separate teacher, sampled-token reverse KL")
