"""Training algorithms as plug-ins: a registry entry (config defaults, options, objective factory) each.

Built in: the policy-gradient family (``ctpo``, ``grpo``, ``gspo``, ``full_is``;
:mod:`.policy_gradient`) and on-policy distillation (``mopd``, ``sdpo``, ``opd``; :mod:`.distillation`).
Add one with :func:`register_algorithm` (docs/architecture.md, "Adding an algorithm").
"""

from toolgym.training.algorithms import builtin as _builtin  # noqa: F401  (registers the built-in algorithms)
from toolgym.training.algorithms.base import Objective, RolloutBatch, StepContext
from toolgym.training.algorithms.registry import ALGORITHMS, Algorithm, get_algorithm, register_algorithm

__all__ = ["ALGORITHMS", "Algorithm", "Objective", "RolloutBatch", "StepContext", "get_algorithm",
           "register_algorithm"]
