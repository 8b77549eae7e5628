"""toolgym: tool-use environments, sandboxes and RL training for LLM agents.

Importing this package stays fast and torch-free: every heavy module loads lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "make": ("toolgym.envs.registry", "make"),
    "register": ("toolgym.envs.registry", "register"),
    "spec": ("toolgym.envs.registry", "spec"),
    "open_sandbox": ("toolgym.sandbox", "open_sandbox"),
    "Limits": ("toolgym.sandbox", "Limits"),
}

__all__ = ["Limits", "__version__", "make", "open_sandbox", "register", "spec"]

if TYPE_CHECKING:  # pragma: no cover
    from toolgym.envs.registry import make, register, spec
    from toolgym.sandbox import Limits, open_sandbox


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'toolgym' has no attribute {name!r}")
