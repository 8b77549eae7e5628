"""The algorithm registry: ``algorithm: NAME`` in a config names one entry here, or an installed
algorithm as ``package.module:NAME`` (an :class:`Algorithm` object). Third-party packages add theirs
through the entry-point group ``toolgym.algorithms``: an :class:`Algorithm` (registered under its own name)
or a hook ``fn()`` that calls :func:`register_algorithm`.

One call, :func:`register_algorithm`, makes an algorithm trainable: its config defaults (the ``loss:``
section and top-level keys such as ``mini_batches``), the dataclass of its ``options:`` section, and the
factory of its :class:`~toolgym.training.algorithms.base.Objective`. This module stays torch-free (the
config loader reads it) and imports only the config schema; factories import their torch code when called.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolgym._registry import Registry
from toolgym.training.config_schema import LossConfig, TrainConfig

if TYPE_CHECKING:
    from toolgym.training.algorithms.base import Objective


@dataclass(frozen=True)
class Algorithm:
    name: str
    defaults: dict[str, Any]  # {"loss": {...LossConfig fields}, other top-level keys: value}
    options: type | None  # dataclass of the ``options:`` section, or None (no options)
    objective: Callable[[TrainConfig], Objective]
    description: str = ""
    loss: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "loss", dict(self.defaults.get("loss") or {}))


ENTRY_POINT_GROUP = "toolgym.algorithms"


def _register_entry_point(entry_point: str, obj: Algorithm) -> None:
    register_algorithm(obj.name, obj.defaults, obj.options, obj.objective, description=obj.description)


ALGORITHMS: Registry[Algorithm] = Registry("algorithm", ENTRY_POINT_GROUP,
                                           accepts=lambda obj: isinstance(obj, Algorithm),
                                           register=_register_entry_point)


def register_algorithm(name: str, defaults: dict[str, Any], options: type | None,
                       objective: Callable[[TrainConfig], Objective], *, description: str = "") -> Algorithm:
    """Make ``algorithm: NAME`` valid and trainable (a later registration of the same name replaces it)."""
    loss = defaults.get("loss") or {}
    stray = set(loss) - {f.name for f in dataclasses.fields(LossConfig)}
    if stray:
        raise ValueError(f"unknown loss fields for algorithm {name!r}: {sorted(stray)}")
    top = {f.name for f in dataclasses.fields(TrainConfig)} - {"loss", "algorithm", "options"}
    stray = set(defaults) - top - {"loss"}
    if stray:
        raise ValueError(f"unknown config keys in the defaults of algorithm {name!r}: {sorted(stray)}")
    if options is not None and not dataclasses.is_dataclass(options):
        raise TypeError(f"options of algorithm {name!r} must be a dataclass, got {options!r}")
    if not callable(objective):
        raise TypeError(f"objective of algorithm {name!r} must be a factory cfg -> Objective")
    algo = Algorithm(name, dict(defaults), options, objective, description)
    ALGORITHMS.add(name, algo)
    return algo


def get_algorithm(name: str) -> Algorithm:
    """The registered algorithm ``name``, or the :class:`Algorithm` that ``package.module:NAME`` names;
    otherwise a ConfigError with the registered names and a close match."""
    return ALGORITHMS.find(name)
