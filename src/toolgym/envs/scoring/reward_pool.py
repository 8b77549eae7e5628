"""Author reward functions run in child processes, where a runaway can be killed.

A thread cannot stop a C call that holds the GIL: an environment author's sync reward function with a
regular expression that backtracks on the answer (`re.match(r"(a+)+$", ...)`) or arithmetic on a huge
integer stops the event loop, every episode and every host thread of the trainer for as long as it
runs, and its time bound can only end the wait for it, never the call. So `Rubric` sends such a
function here when a child can find it by name (`module:qualname`, the very object the parent holds;
not `__main__`, not a closure, lambda, bound method or instance) and does not take `state` (it holds
the episode's sandbox, which cannot cross a pipe). Its arguments travel as JSON (the `Task` rebuilt
from `to_dict`); the call runs in one of a few warm children (`toolgym.envs.scoring.scorer_worker`, one per
concurrent scoring up to `POOL_SIZE`, so one stall never queues other episodes behind it), under a
deadline of the rubric's sync bound: past it the child is killed (`kills`), the component scores 0
with a `RewardTimeout` note, and the next call gets a fresh child. Waiting for a free child, starting
one and importing the function's module are reported as waits, not as the episode's own time.

toolgym's own reward functions stay on the caller's thread (they parse in linear time, and their
third-party parts already run in the scorer worker), and so does an author function the child cannot
import (its module is made at run time, say): that residual is documented in docs/threat-model.md.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from toolgym.envs.scoring.offloop import RewardTimeout
from toolgym.envs.scoring.scorer_worker import START_S, ScorerFailed, ScorerTimeout, ScorerWorker
from toolgym.envs.types import Task
from toolgym.errors import InfrastructureError

__all__ = ["POOL_SIZE", "RewardPool", "Unimportable", "pool", "reference", "encode"]

POOL_SIZE = max(4, os.cpu_count() or 1)  # children at most: scorings beyond it wait (reported as waiting)
MEMORY_BYTES = 8 << 30  # an author's function may load more than a scorer does; still far below the host's
RECYCLE_BYTES = 2 << 30
UNBOUNDED_S = 86400.0  # `sync_timeout_s=None`: still killable, by a day's deadline
_TASK_KEY = "__toolgym_task__"


class Unimportable(RuntimeError):
    """The child could not import the function: the caller runs it on its own thread instead."""


def reference(fn: Callable[..., Any]) -> str | None:
    """`module:qualname` when a child importing it gets this very object, else None."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return None
    if module == "__main__" or module == "toolgym" or module.startswith("toolgym.") or "<" in qualname:
        return None
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return f"{module}:{qualname}" if obj is fn else None


def encode(kwargs: dict[str, Any]) -> str | None:
    """The call's arguments as JSON (a Task as its dict), or None when one cannot cross as JSON."""
    out = dict(kwargs)
    if isinstance(out.get("task"), Task):
        out["task"] = {_TASK_KEY: out["task"].to_dict()}
    try:
        return json.dumps(out)
    except (TypeError, ValueError):
        return None


class RewardPool:
    """Up to `size` warm children; thread-safe, each call has a child of its own while it runs."""

    def __init__(self, size: int = POOL_SIZE) -> None:
        self.size = size
        self._all: list[ScorerWorker] = []
        self._free: list[ScorerWorker] = []
        self._cond = threading.Condition()

    @property
    def kills(self) -> int:
        """Children killed past a deadline (or found dead) since this pool was made."""
        return sum(w.kills for w in list(self._all))

    def call(self, ref: str, payload: str, deadline_s: float | None) -> Any:
        """What the function named `ref` returns for the JSON keyword arguments `payload`.

        Raises `RewardTimeout` past the deadline (the child is killed), `Unimportable` when the child
        cannot import it, InfrastructureError when the function raised one, else `ScorerFailed`."""
        from toolgym.sandbox.waiting import waiting

        with waiting():  # a child busy with another episode's answer is that episode's time
            child = self._take()
        module = ref.partition(":")[0]
        deadline = UNBOUNDED_S if deadline_s is None else deadline_s
        try:
            return child.call(f"{__name__}:run_here", [ref, payload], deadline_s=deadline,
                              setup=(f"{__name__}:prepare_here", [list(sys.path), module], START_S))
        except ScorerTimeout:
            raise RewardTimeout(f"{ref} ran over its bound of {deadline:g} s of its own time; its worker "
                                "process was killed, scored 0") from None
        except ScorerFailed as exc:
            kind, _, message = str(exc).partition(": ")
            if kind == Unimportable.__name__:
                raise Unimportable(message) from None
            if kind == InfrastructureError.__name__:
                raise InfrastructureError(message) from None
            raise ScorerFailed(str(exc).replace(f"{__name__}:run_here", ref)) from None
        finally:
            self._give(child)

    def close(self) -> None:
        """Kill every child (a later call starts new ones)."""
        with self._cond:
            for w in self._all:
                w.close()

    def _take(self) -> ScorerWorker:
        with self._cond:
            while not self._free and len(self._all) >= self.size:
                self._cond.wait()
            if self._free:
                return self._free.pop()
            child = ScorerWorker(memory_bytes=MEMORY_BYTES, recycle_bytes=RECYCLE_BYTES)
            self._all.append(child)
            return child

    def _give(self, child: ScorerWorker) -> None:
        with self._cond:
            self._free.append(child)
            self._cond.notify()


_POOL: RewardPool | None = None
_POOL_LOCK = threading.Lock()


def pool() -> RewardPool:
    """This process's pool (children start on first use, never at import)."""
    global _POOL
    if _POOL is None:
        with _POOL_LOCK:
            if _POOL is None:
                _POOL = RewardPool()
    return _POOL


def _forget_after_fork() -> None:
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()  # the children are the parent's


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


# ----------------------------------------------------------------------------------- in the child

_IMPORT_ERRORS: dict[str, str] = {}


def prepare_here(path: list[str], module: str) -> None:  # pragma: no cover - runs in the child
    """Once per child and module: the parent's import path, then the module (its failure kept for later)."""
    import importlib

    sys.path[:] = list(dict.fromkeys([*path, *sys.path]))
    try:
        importlib.import_module(module)
    except BaseException as exc:  # noqa: BLE001 - a module that exits on import is unimportable too
        _IMPORT_ERRORS[module] = f"{type(exc).__name__}: {exc}"


def run_here(ref: str, payload: str) -> Any:  # pragma: no cover - runs in the child
    """Call the function named `ref` with the decoded keyword arguments; a JSON-able number back."""
    import asyncio
    import importlib
    import inspect

    module, _, qualname = ref.partition(":")
    if module in _IMPORT_ERRORS:
        raise Unimportable(_IMPORT_ERRORS[module])
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception as exc:
        raise Unimportable(f"{type(exc).__name__}: {exc}") from None
    kwargs = json.loads(payload)
    task = kwargs.get("task")
    if isinstance(task, dict) and set(task) == {_TASK_KEY}:
        kwargs["task"] = Task.from_dict(task[_TASK_KEY])
    value = obj(**kwargs)
    if inspect.isawaitable(value):
        async def wait() -> Any:
            return await value

        value = asyncio.run(wait())
    return float(value)
