"""Reward composition: a Rubric is a weighted list of plain reward functions.

Each function takes any of the keyword arguments `completion` (the final assistant text),
`answer` (the detected final answer or None), `task`, `messages` (the whole episode) and
`state` (per-episode scratch, e.g. the sandbox), and returns a float. Async functions are
awaited; sync ones never run on the event loop, and each is bounded by `sync_timeout_s` of its own
time (over it, the component scores 0 and says so). A sync function an author wrote runs in a child
process that is killed at that bound (`toolgym.envs.scoring.reward_pool`: a C call holding the GIL would
otherwise stop every episode) when a child can import it and it takes no `state`; toolgym's own, and
any other, run on a thread of their own (`toolgym.envs.scoring.offloop`). A function that raises scores 0
for that component and the error is reported; an InfrastructureError (a fault no program could have
caused: the sandbox engine, the host) is raised on instead, so the episode is not scored at all (the
runner masks it).
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolgym.envs import scoring
from toolgym.errors import ConfigError, InfrastructureError

RewardFn = Callable[..., Any]
_ARGS = ("completion", "answer", "task", "messages", "state")
SYNC_TIMEOUT_S = 60.0  # a sync reward function's own time, waits for others left out


@dataclass
class RubricResult:
    """The weighted total and each component's raw score (reported in info["reward_components"])."""

    total: float
    components: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


class Rubric:
    """`Rubric([correct, (format_ok, 0.1)])`: functions with optional weights (default 1.0).

    `sync_timeout_s` bounds each sync function's own time (None: a day). `isolate=False` keeps author
    functions on a thread too (what they print then reaches stdout; in a child it is dropped)."""

    def __init__(self, funcs: Sequence[RewardFn | tuple[RewardFn, float]], weights: Sequence[float] | None = None,
                 range: tuple[float, float] | None = None, sync_timeout_s: float | None = SYNC_TIMEOUT_S,
                 isolate: bool = True) -> None:
        items: list[tuple[str, RewardFn, float]] = []
        for i, f in enumerate(funcs):
            fn, w = (f if isinstance(f, tuple) else (f, 1.0 if weights is None else weights[i]))
            if not callable(fn):
                raise ConfigError(f"rubric item {i} is not callable: {fn!r}")
            name = getattr(fn, "__name__", f"reward_{i}")
            if any(name == n for n, _, _ in items):
                name = f"{name}_{i}"
            items.append((name, fn, float(w)))
        if not items:
            raise ConfigError("a Rubric needs at least one reward function")
        self.items = items
        self._params = {name: _accepted(fn) for name, fn, _ in items}
        self._async = {name: _is_async(fn) for name, fn, _ in items}
        # where a child can run it: module-level author functions that need no sandbox handle
        self._refs = {name: _child_ref(fn, self._params[name]) if isolate and not self._async[name] else None
                      for name, fn, _ in items}
        self.sync_timeout_s = sync_timeout_s
        # every component scores in [0, 1] unless documented otherwise
        lo = sum(min(0.0, w) for _, _, w in items)
        hi = sum(max(0.0, w) for _, _, w in items)
        self.range = range or (lo, hi)

    @property
    def names(self) -> list[str]:
        return [n for n, _, _ in self.items]

    async def ascore(self, **kwargs: Any) -> RubricResult:
        total = 0.0
        comps: dict[str, float] = {}
        errors: dict[str, str] = {}
        for name, fn, w in self.items:
            params = self._params[name]
            args = kwargs if params is None else {k: v for k, v in kwargs.items() if k in params}
            try:
                if self._async[name]:
                    v = fn(**args)
                else:  # never on the loop's thread: a slow scorer would freeze every batch-mate
                    v = await self._call_sync(name, fn, args)
                if inspect.isawaitable(v):
                    v = await v
                v = float(v)
                if math.isnan(v):
                    raise ValueError("reward is NaN")
            except (asyncio.CancelledError, InfrastructureError):
                raise
            except Exception as exc:
                v = 0.0
                errors[name] = f"{type(exc).__name__}: {exc}"
            comps[name] = v
            total += w * v
        return RubricResult(total=total, components=comps, errors=errors)

    async def _call_sync(self, name: str, fn: RewardFn, args: dict[str, Any]) -> Any:
        ref = self._refs[name]
        payload = None if ref is None else scoring.encode(args)
        if ref is not None and payload is not None:
            try:  # the child's deadline is the bound; a thread only waits on its pipe
                return await scoring.call_off_loop(scoring.pool().call, {"ref": ref, "payload": payload,
                                                                     "deadline_s": self.sync_timeout_s}, None)
            except scoring.Unimportable:
                self._refs[name] = None  # from now on on a thread, as a closure would be
        return await scoring.call_off_loop(fn, args, self.sync_timeout_s)

    def score(self, **kwargs: Any) -> RubricResult:
        """Synchronous scoring (for use outside an event loop)."""
        return asyncio.run(self.ascore(**kwargs))


def _is_async(fn: RewardFn) -> bool:
    """fn is a coroutine function. Anything else runs off the loop; what it returns is awaited if it
    is awaitable. An object whose __call__ is async (a judge term) is awaited on the loop too."""
    return inspect.iscoroutinefunction(fn) or (
        not inspect.isroutine(fn) and inspect.iscoroutinefunction(type(fn).__call__))  # noqa: B004


def _child_ref(fn: RewardFn, params: set[str] | None) -> str | None:
    """`module:qualname` for a function a child process may run: one that takes no `state` (its
    sandbox handle cannot cross a pipe; **kwargs may read it too)."""
    if params is None or "state" in params:
        return None
    return scoring.reference(fn)


def _accepted(fn: RewardFn) -> set[str] | None:
    """The keyword arguments fn takes (None = it takes **kwargs)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return None
    return set(sig.parameters) & set(_ARGS)


def format_reward(completion: str, answer: str | None) -> float:
    """1.0 when the final message states an answer in a detectable form, else 0.0."""
    return 1.0 if answer is not None else 0.0
