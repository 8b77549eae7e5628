"""Running the code that scores a model's answer, where that code cannot stall or subvert the trainer: the
one entry point of scoring (import its names from here).

- :func:`call_off_loop`: a sync reward function on a thread of its own, bounded by its own time
  (:class:`RewardTimeout`; :mod:`.offloop`);
- :func:`worker`: the warm child interpreter that runs third-party scorers under a wall deadline and memory
  and CPU caps (:class:`ScorerTimeout`, :class:`ScorerFailed`, :func:`in_worker`; :mod:`.scorer_worker`);
- :func:`pool`: a few such children for author reward functions that a child can import by name
  (:func:`reference`, :func:`encode`, :class:`Unimportable`; :mod:`.reward_pool`);
- :func:`guarded`: refuses every audit event by which a scorer could run the answer or act on the host
  (:class:`ScorerRefused`; :mod:`.guard`).

The threat model of each: docs/threat-model.md. Names load lazily: a scorer child imports only what it runs.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "call_off_loop": "offloop", "RewardTimeout": "offloop",
    "worker": "scorer_worker", "in_worker": "scorer_worker", "ScorerWorker": "scorer_worker",
    "ScorerTimeout": "scorer_worker", "ScorerFailed": "scorer_worker",
    "pool": "reward_pool", "reference": "reward_pool", "encode": "reward_pool", "Unimportable": "reward_pool",
    "RewardPool": "reward_pool",
    "guarded": "guard", "ScorerRefused": "guard",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
