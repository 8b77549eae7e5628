"""The loss settings of the built-in policy-gradient algorithms, each written once.

``toolgym.training.algorithms.builtin`` registers the algorithms with them, ``ClipConfig.ctpo/grpo/gspo``
and the TRL and verl integrations read them. CTPO's are ``LossConfig``'s defaults (docs/algorithms/ctpo.md);
GRPO's and GSPO's are the papers' (docs/algorithms/baselines.md). Torch-free; imports only the schema.
"""

from __future__ import annotations

import math
from typing import Any

from toolgym.training.config_schema import LossConfig

#: the LossConfig fields an algorithm's preset sets (the mismatch weight is a separate switch)
PRESET_FIELDS = ("ratio", "clip_mode", "eps_low", "eps_high", "power", "dual", "agg")

CTPO: dict[str, Any] = {k: getattr(LossConfig(), k) for k in PRESET_FIELDS}
GRPO: dict[str, Any] = dict(ratio="token", clip_mode="fixed", eps_low=0.2, eps_high=0.2, power=0.0, dual=3.0,
                            agg="token-mean")
GSPO: dict[str, Any] = dict(ratio="gspo", clip_mode="fixed", eps_low=3e-4, eps_high=4e-4, power=0.0, dual=None,
                            agg="seq-mean-token-mean")
# Full IS is analysed, not trained, in the paper; its clip is toolgym's choice: a uniform log-space
# window mirroring GRPO's ratio-space one ([log 0.8, log 1.2] ~ ±0.2), dual clip at log 3.
FULL_IS: dict[str, Any] = dict(ratio="sequence", clip_mode="adaptive", eps_low=0.2, eps_high=0.2, power=0.0,
                               dual=math.log(3.0), agg="token-mean")

LOSS_PRESETS: dict[str, dict[str, Any]] = {"ctpo": CTPO, "grpo": GRPO, "gspo": GSPO, "full_is": FULL_IS}
