"""``Registry[T]``: the one shape of every named plug-in kind (samplers, algorithms, tool-call parsers, sandbox
backends, asset builders), so each reads, loads and fails the same way:

- an entry is an object or a lazy ``"module:attr"`` reference, imported the first time it is asked for (so a
  registry of torch-backed things stays torch-free until one is used);
- third-party packages add entries through the registry's entry-point group (loaded once, on the first
  lookup or listing); an entry point's object is an entry (registered under the entry point's name) or a
  hook ``fn()`` that registers entries itself;
- a user-given name that is not registered but reads ``package.module:Name`` is imported as is, so a config
  can name an out-of-tree plug-in that no entry point declares;
- an unknown name gets :func:`toolgym.errors.unknown`'s one line; a plug-in that fails to load is named with
  its reference and its error, and breaks no other entry.

Stdlib only: ``import toolgym`` stays fast.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping
from importlib import metadata
from typing import Any, Generic, TypeVar

from toolgym._plugins import broken_note, load_entry_points, load_failure
from toolgym.errors import ConfigError, unknown

T = TypeVar("T")

_MISSING: Any = object()


def is_reference(name: object) -> bool:
    """``package.module:Name``: a lazy entry or a user-named out-of-tree plug-in."""
    if not isinstance(name, str) or name.count(":") != 1:
        return False
    module, attr = name.split(":")
    return bool(module) and bool(attr) and all(p.isidentifier() for p in (*module.split("."), *attr.split(".")))


def import_reference(ref: str) -> Any:
    """The object ``module:attr`` names (``attr`` may be dotted)."""
    module, _, attr = ref.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


class Registry(Mapping[str, T], Generic[T]):
    """Named entries of one plug-in kind. ``kind`` names it in messages ("sampler"); ``group`` is its
    entry-point group (None: built-ins only); ``accepts(obj)`` says whether a loaded object is an entry
    (otherwise a callable entry-point object is a hook); ``register(ep_name, obj)`` registers an entry an entry
    point gives (default: under the entry point's name); ``error`` is the exception a bad name raises."""

    def __init__(self, kind: str, group: str | None = None, *, accepts: Callable[[Any], bool] | None = None,
                 error: type[Exception] = ConfigError, register: Callable[[str, Any], None] | None = None,
                 ) -> None:
        self.kind = kind
        self.group = group
        self.error = error
        self._accepts = accepts or (lambda obj: True)
        self._register = register or (lambda name, obj: self.add(name, obj))
        self._entries: dict[str, Any] = {}  # name -> object, or "module:attr" not yet imported
        self._lazy: set[str] = set()
        self.errors: dict[str, str] = {}  # "name (module:attr)" -> the error its plug-in raised
        self._loaded = group is None

    # ------------------------------------------------------------------ registering
    def add(self, name: str, entry: T | str, *, lazy: bool = False, override: bool = True) -> None:
        """Register ``entry`` under ``name``; ``lazy``: ``entry`` is a ``"module:attr"`` to import when asked
        for. Without ``override`` a different entry under a taken name is refused."""
        if lazy and not is_reference(entry):
            raise ValueError(f"{self.kind} {name!r}: a lazy entry must be 'module:attr'; got {entry!r}")
        if not override and name in self._entries and self._entries[name] != entry:
            raise ConfigError(f"{self.kind} {name!r} is already registered ({self._entries[name]!r}); pass "
                              "override=True to replace it")
        self._entries[name] = entry
        (self._lazy.add if lazy else self._lazy.discard)(name)

    def pop(self, name: str, default: Any = _MISSING) -> Any:
        """Unregister ``name`` (tests, plug-ins replacing a built-in)."""
        self._lazy.discard(name)
        if default is _MISSING:
            return self._entries.pop(name)
        return self._entries.pop(name, default)

    def load_plugins(self, force: bool = False) -> None:
        """Register every entry point of ``group`` (once; ``force``: again)."""
        if self.group is None or (self._loaded and not force):
            return
        self._loaded = True
        load_entry_points(self.group, self._entry_point, self.errors)

    def _entry_point(self, ep: metadata.EntryPoint) -> None:
        obj = ep.load()
        if self._accepts(obj):
            self._register(ep.name, obj)
        elif callable(obj):
            obj()
        else:
            raise TypeError(f"expected a {self.kind} or a hook function, got {type(obj).__name__}")

    # ------------------------------------------------------------------ looking up
    def __getitem__(self, name: str) -> T:
        self.load_plugins()
        if name not in self._entries:
            raise KeyError(name)
        if name in self._lazy:
            ref = self._entries[name]
            obj = self._import(name, ref)
            self._entries[name] = obj
            self._lazy.discard(name)
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        self.load_plugins()
        return iter(list(self._entries))

    def __len__(self) -> int:
        self.load_plugins()
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        self.load_plugins()
        return name in self._entries

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {list(self._entries)})"

    def find(self, name: object, what: str = "", known: Any = None, note: str = "") -> T:
        """The entry ``name``: registered, or an out-of-tree ``package.module:Name`` (imported and registered
        under that name); otherwise ``error`` with the one-line "unknown" message (``what``: where the name
        came from, e.g. a config field; ``note``: what else the name may be), naming a plug-in that failed to
        load."""
        if isinstance(name, str) and name in self:
            return self[name]
        if is_reference(name):
            assert isinstance(name, str)
            obj = self._import(name, name)
            self.add(name, obj)
            return obj
        notes = [n for n in (note, f"from {what}" if what else "", broken_note(name, self.errors)) if n]
        raise self.error(unknown(self.kind, name, list(self) if known is None else known, "; ".join(notes)))

    def _import(self, name: str, ref: str) -> Any:
        try:
            obj = import_reference(ref)
        except Exception as exc:
            raise self.error(load_failure(self.kind, name, ref, exc)) from None
        if not self._accepts(obj):
            raise self.error(f"{self.kind} {name!r}: {ref!r} is an object of type {type(obj).__name__}, "
                             f"not a {self.kind}")
        return obj
