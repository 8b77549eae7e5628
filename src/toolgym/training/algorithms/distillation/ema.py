"""EMA self-teacher (docs/algorithms/mopd.md, "The teacher"): a full, gradient-free copy of the
student, moved toward it once per training step with ``phi <- (1 - rate) * phi + rate * theta``."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable

import torch


@torch.no_grad()
def ema_update(teacher: torch.nn.Module, student: torch.nn.Module, rate: float = 0.05) -> None:
    """Move every teacher parameter (and floating buffer) toward the student's, in place."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"EMA rate must be in [0, 1], got {rate}")
    if rate == 0.0:
        return
    t_params = dict(teacher.named_parameters())
    for name, p in student.named_parameters():
        t_params[name].lerp_(p.detach().to(t_params[name].dtype), rate)
    t_bufs = dict(teacher.named_buffers())
    for name, b in student.named_buffers():
        if name in t_bufs and t_bufs[name].is_floating_point():
            t_bufs[name].copy_(b)  # buffers (e.g. rotary tables) are not learned: follow the student


class EMATeacher:
    """Owns the teacher copy. ``rate = 0`` keeps it frozen (the separate-teacher variant).

    The copy is kept in float32 whatever the student's dtype: a bf16 teacher would round away
    ``rate * (theta - phi)`` steps far below its 8-bit mantissa (under ``model.dtype: bf16`` it is
    run under the same autocast as the student, so only its forward is bf16).
    """

    def __init__(self, student: torch.nn.Module, rate: float = 0.05) -> None:
        self.rate = rate
        self.model = copy.deepcopy(student).float()
        self.model.requires_grad_(False)
        self.model.eval()
        self.updates = 0
        self.skipped = 0

    @classmethod
    def frozen_view(cls, model: torch.nn.Module) -> EMATeacher:
        """A frozen teacher that is ``model`` itself (no copy): e.g. a LoRA policy with its adapters off."""
        self = cls.__new__(cls)
        self.rate, self.model, self.updates, self.skipped = 0.0, model, 0, 0
        return self

    def update(self, student: torch.nn.Module, grad_norms: Iterable[float]) -> bool:
        """Call once per training step after its optimizer step(s) with their gradient norms.

        Skips (returns False) when no step had a finite gradient norm.
        """
        if not any(math.isfinite(float(g)) for g in grad_norms):
            self.skipped += 1
            return False
        ema_update(self.model, student, self.rate)
        self.updates += 1
        return True
