"""The trust-region clip of the importance ratio, as the loss takes it (:class:`ClipConfig`). Torch-free.

Its rules are the config's (:func:`toolgym.training.config_schema.clip_problem`, written once there), so a
``ClipConfig`` built by hand and a config's ``loss`` section accept the same settings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolgym.training.config_schema import CLIP_MODES as _CONFIG_CLIP_MODES
from toolgym.training.config_schema import LossConfig, clip_problem
from toolgym.training.policy_gradient.loss_presets import CTPO, GRPO, GSPO

# the names the config accepts (toolgym.training.config_schema); clip_mode "none" is clip=None here
CLIP_MODES: tuple[str, ...] = tuple(m for m in _CONFIG_CLIP_MODES if m != "none")


@dataclass(frozen=True)
class ClipConfig:
    """Trust-region clip of the importance ratio.

    ``mode="adaptive"``: log-space window ``[-eps_low·t^power, eps_high·t^power]`` around 0, with t
    the 1-indexed count of policy tokens so far; dual clip for A<0 at ``exp(dual·t^power)``.
    ``mode="fixed"``: ratio-space window ``[1-eps_low, 1+eps_high]``; dual clip at the ratio ``dual``.
    ``dual=None`` disables the dual clip.
    """

    # CTPO's, read from the one place they are written: LossConfig's defaults (docs/algorithms/ctpo.md)
    mode: str = CTPO["clip_mode"]
    eps_low: float = CTPO["eps_low"]
    eps_high: float = CTPO["eps_high"]
    power: float = CTPO["power"]
    dual: float | None = CTPO["dual"]

    def __post_init__(self) -> None:
        if self.mode not in CLIP_MODES:
            raise ValueError(f"ClipConfig.mode must be one of {', '.join(repr(m) for m in CLIP_MODES)}; "
                             f"got {self.mode!r}")
        bad = clip_problem(self.mode, self.eps_low, self.eps_high, self.power, self.dual, mode_field="mode",
                           null="None")
        if bad is not None:
            name, allowed, got = bad
            raise ValueError(f"ClipConfig.{name} must be {allowed}; got {got!r}")

    @classmethod
    def from_loss(cls, loss: LossConfig | dict[str, Any]) -> ClipConfig | None:
        """The clip of a config's ``loss`` section (or a preset of :mod:`.loss_presets`); None when
        ``clip_mode`` is ``none``. Adaptive mode uses ``power``; fixed mode has none."""
        get = loss.get if isinstance(loss, dict) else lambda k: getattr(loss, k)
        mode = get("clip_mode")
        if mode == "none":
            return None
        power = get("power") if mode == "adaptive" else 0.0
        return cls(mode=mode, eps_low=get("eps_low"), eps_high=get("eps_high"), power=power, dual=get("dual"))

    @classmethod
    def ctpo(cls) -> ClipConfig:
        """CTPO defaults: adaptive 0.025/0.05, p=0.5, dual 0.05 (docs/algorithms/ctpo.md, "Clipping")."""
        return cls()

    @classmethod
    def grpo(cls) -> ClipConfig:
        """GRPO defaults: ratio window [0.8, 1.2], dual clip 3."""
        return cls.from_loss(GRPO)  # type: ignore[return-value]

    @classmethod
    def gspo(cls) -> ClipConfig:
        """GSPO defaults: ratio window [1-3e-4, 1+4e-4], no dual clip."""
        return cls.from_loss(GSPO)  # type: ignore[return-value]
