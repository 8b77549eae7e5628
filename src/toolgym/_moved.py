"""Old import paths of modules that moved: ``import OLD`` gives the module at its new place (the same object, so
its names, private ones included, and a monkeypatch reach both), imported only when the old name is asked for.

A package calls :func:`alias_modules` with ``{"old.dotted.name": "new.dotted.name"}``; stdlib only.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

_MOVED: dict[str, str] = {}


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name and hands back the new module (found after the regular finders, which no longer find it)."""

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(_MOVED[spec.name])
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # the import machinery gave the module the old name's spec; it keeps its own
        module.__spec__ = self._specs.pop(module.__name__, module.__spec__)


_FINDER = _MovedFinder()


def alias_modules(moved: dict[str, str]) -> None:
    """Make each old module name import its new module."""
    _MOVED.update(moved)
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)
