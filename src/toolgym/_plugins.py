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


def broken_note(name: object, errors: dict[str, str]) -> str:
    """The note an unknown name gets when a plug-in of that name failed to load (every registry says it alike)."""
    broken = [k for k in errors if str(name) and (k == str(name) or k.startswith(f"{name} ("))]
    return f"the plug-in {broken[0]} failed to load: {errors[broken[0]]}" if broken else ""


def load_failure(kind: str, name: str, ref: str, exc: BaseException) -> str:
    """The line a plug-in that fails to import gets, naming it and its reference (every registry says it alike)."""
    where = f"{kind} {ref!r}" if name == ref else f"{kind} {name!r} ({ref})"
    hint = " (is its package installed in this environment?)" if isinstance(exc, ImportError) else ""
    return f"the plug-in {where} failed to load: {type(exc).__name__}: {exc}{hint}"
