"""Entry-point plug-ins, one loop for every registry (environments, samplers): a broken plug-in is recorded
by name instead of breaking the others."""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata


def load_entry_points(group: str, handle: Callable[[metadata.EntryPoint], None], errors: dict[str, str]) -> None:
    """``handle(ep)`` for each entry point of ``group``; what raises goes into ``errors`` as "name (value)"."""
    try:
        eps = metadata.entry_points(group=group)
    except Exception as exc:  # pragma: no cover - broken metadata on the path
        errors["<entry points>"] = str(exc)
        return
    for ep in eps:
        try:
            handle(ep)
        except Exception as exc:
            errors[f"{ep.name} ({ep.value})"] = f"{type(exc).__name__}: {exc}"
