"""Reward composition: a Rubric is a weighted list of plain reward functions.

Each function takes any of the keyword arguments `completion` (the final assistant text),
`answer` (the detected final answer or None), `task`, `messages` (the whole episode) and
`state` (per-episode scratch, e.g. the sandbox), and returns a float. Async functions are
awaited; sync ones run on a thread of their own (`toolgym.envs.offloop`), never on the event loop,
each bounded by `sync_timeout_s` of its own time (over it, the component scores 0 and says so). A function that raises scores 0 for that component and the error is reported; an
InfrastructureError (a fault no program could have caused: the sandbox engine, the host) is
raised on instead, so the episode is not scored at all (the runner masks it).
"""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolgym.envs.offloop import call_off_loop
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

    `sync_timeout_s` bounds each sync function's own time (None: unbounded)."""

    def __init__(self, funcs: Sequence[RewardFn | tuple[RewardFn, float]], weights: Sequence[float] | None = None,
                 range: tuple[float, float] | None = None, sync_timeout_s: float | None = SYNC_TIMEOUT_S) -> None:
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
                    v = await call_off_loop(fn, args, self.sync_timeout_s)
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

    def score(self, **kwargs: Any) -> RubricResult:
        """Synchronous scoring (for use outside an event loop)."""
        return asyncio.run(self.ascore(**kwargs))


def _is_async(fn: RewardFn) -> bool:
    """fn is a coroutine function. Anything else runs off the loop; what it returns is awaited if it
    is awaitable (an object whose __call__ is async only creates its coroutine there)."""
    return inspect.iscoroutinefunction(fn)


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
