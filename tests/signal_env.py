"""Arith with a reward that tells any two episodes apart, for runs that check the training machinery rather than
learning (weight pushes, device paths): on Arith's reward alone a small or random model's groups often tie at every
step, the advantages are all 0 and the policy never moves, so a missed push or a broken gradient could not show."""

from __future__ import annotations

import hashlib
import json
from typing import Any

SIGNAL_ARITH = "tests/SignalArith-v0"
#: the id a rollout worker process can resolve by itself (``module:id`` imports this module, which registers it)
SIGNAL_ARITH_REF = f"tests.signal_env:{SIGNAL_ARITH}"


def sample_fingerprint(messages: list[dict[str, Any]]) -> float:
    """A number in [0, 1) that differs between any two different episodes (their assistant text hashed)."""
    text = json.dumps([m.get("content") for m in messages if m.get("role") == "assistant"])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") / 2**32


def register_signal_arith() -> str:
    """Register ``tests/SignalArith-v0``: Arith's correctness at weight 0.5 plus 0.5 x the episode fingerprint."""
    from toolgym.envs.builtin.arith import ArithEnv, arith_correct
    from toolgym.envs.registry import register
    from toolgym.envs.rubric import Rubric

    class SignalArith(ArithEnv):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.rubric = Rubric([(arith_correct, 0.5), (sample_fingerprint, 0.5)])
            self.reward_range = self.rubric.range

    register(SIGNAL_ARITH, SignalArith, override=True)
    return SIGNAL_ARITH


register_signal_arith()  # on import too, so SIGNAL_ARITH_REF names it in any process
