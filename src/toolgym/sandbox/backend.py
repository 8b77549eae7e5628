"""The contract every sandbox backend keeps, declared once (issue 37).

A backend makes workers; a worker is one live sandbox whose executor answers one request at a time
(`call`) until it is closed. `Sandbox` and its `Pool` use nothing else of either, so an out-of-tree
backend (the `toolgym.sandbox_backends` entry-point group, see `sandbox.api.BACKENDS`) is whatever
satisfies these two protocols. The built-in ones declare them: `DockerBackend` (under gVisor when given
`runtime="runsc"`: the same class, its containers on another OCI runtime) and `LocalBackend`.
`conformance(cls, protocol)` checks a class against one by name and signature, as the tests do.
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol, runtime_checkable

from toolgym.sandbox.types import Limits

__all__ = ["Backend", "Worker", "conformance"]


@runtime_checkable
class Worker(Protocol):
    """One live sandbox: `call` sends one executor request and returns its reply (raising
    `protocol.ChannelClosed` when the sandbox died or stalled); `close` ends the sandbox for good."""

    def call(self, req: dict[str, Any], timeout: float) -> dict[str, Any]: ...

    def close(self) -> None: ...


@runtime_checkable
class Backend(Protocol):
    """A factory of workers of one kind, built as ``cls(limits, image=...)`` (further keyword options only
    with defaults); `name` is what `Sandbox.backend` reports."""

    name: str

    def __init__(self, limits: Limits, image: str | None = None) -> None: ...

    def new_worker(self) -> Worker: ...

    def close(self) -> None: ...


def _members(protocol: type) -> list[str]:
    """The protocol's own methods (its __init__ only where it writes one: typing puts a stand-in in others)
    and annotated attributes."""
    methods = [n for n, v in vars(protocol).items() if callable(v) and (not n.startswith("_") or (
        n == "__init__" and getattr(v, "__qualname__", "").startswith(protocol.__name__ + ".")))]
    return methods + list(getattr(protocol, "__annotations__", {}))


def _compatible(want: inspect.Signature, got: inspect.Signature) -> str | None:
    """Why `got` cannot be called as `want` is (None when it can): the same parameters, by name, kind and
    order, those with a default in `want` with one in `got`; any further parameter of `got` has a default."""
    wanted = [p for p in want.parameters.values() if p.name != "self"]
    have = [p for p in got.parameters.values() if p.name != "self"]
    for i, w in enumerate(wanted):
        if i >= len(have):
            return f"lacks parameter {w.name!r}"
        h = have[i]
        if (h.name, h.kind) != (w.name, w.kind):
            return f"parameter {i + 1} is {h.name!r} ({h.kind.description}), not {w.name!r} ({w.kind.description})"
        if w.default is not inspect.Parameter.empty and h.default is inspect.Parameter.empty:
            return f"parameter {w.name!r} has no default"
    extra = [h.name for h in have[len(wanted):]
             if h.default is inspect.Parameter.empty and h.kind not in (h.VAR_POSITIONAL, h.VAR_KEYWORD)]
    return f"has further parameters without a default: {', '.join(extra)}" if extra else None


def conformance(cls: type, protocol: type) -> list[str]:
    """What `cls` lacks of `protocol` (Backend or Worker): each member by name, each method by signature,
    `name` as a str; empty when it conforms."""
    problems = []
    for member in _members(protocol):
        if member in getattr(protocol, "__annotations__", {}):
            if not isinstance(getattr(cls, member, None), str):
                problems.append(f"{cls.__name__}.{member} is not a str class attribute")
            continue
        impl = getattr(cls, member, None)
        if impl is None or not callable(impl):
            problems.append(f"{cls.__name__} has no method {member}()")
            continue
        why = _compatible(inspect.signature(vars(protocol)[member]), inspect.signature(impl))
        if why:
            problems.append(f"{cls.__name__}.{member}() {why}")
    return problems
