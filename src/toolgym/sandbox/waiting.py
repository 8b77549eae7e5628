"""Time an episode spends waiting for others: for a free sandbox of the pool, or for its batch-mates
in a micro-batched judge call.

That time is not the episode's own: a rollout runner that bounds each episode's environment time
(`EpisodeLimits.max_wall_s`) subtracts it, so a program is never timed out because other programs
were slow. The runner opens a `WaitClock` around each environment call (`measuring`); sandbox calls
made inside it (tasks and threads started from it inherit the context) report what they waited,
live: a wait in progress counts from its start.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import threading
import time
from collections.abc import Iterator

_CLOCK: contextvars.ContextVar[WaitClock | None] = contextvars.ContextVar("toolgym_wait_clock", default=None)


class WaitClock:
    """Seconds spent waiting for others, thread-safe; waits in progress included.

    A clock with a `parent` (a bounded part of an environment call, e.g. one reward function)
    reports every wait to the parent as well, so both leave it out of their own time."""

    def __init__(self, parent: WaitClock | None = None) -> None:
        self._lock = threading.Lock()
        self._closed = 0.0
        self._open: dict[int, tuple[float, int | None]] = {}
        self._ids = itertools.count()
        self._parent = parent

    def start(self) -> int:
        """A wait begins now; returns its token for `stop`."""
        up = self._parent.start() if self._parent is not None else None
        with self._lock:
            token = next(self._ids)
            self._open[token] = (time.monotonic(), up)
            return token

    def stop(self, token: int) -> None:
        with self._lock:
            began, up = self._open.pop(token, (None, None))
            if began is not None:
                self._closed += time.monotonic() - began
        if up is not None and self._parent is not None:
            self._parent.stop(up)

    def charge(self, seconds: float) -> None:
        """Part of a closed wait turned out to be the episode's own time (its share of a judge call)."""
        with self._lock:
            self._closed -= max(0.0, seconds)
        if self._parent is not None:
            self._parent.charge(seconds)

    @property
    def seconds(self) -> float:
        with self._lock:
            now = time.monotonic()
            return self._closed + sum(now - began for began, _ in self._open.values())


def current() -> WaitClock | None:
    """The clock of the environment call this code runs in, if a runner measures one."""
    return _CLOCK.get()


@contextlib.contextmanager
def measuring(clock: WaitClock) -> Iterator[WaitClock]:
    """Code run in this context (and tasks or threads it starts) reports its waits to `clock`."""
    token = _CLOCK.set(clock)
    try:
        yield clock
    finally:
        _CLOCK.reset(token)


@contextlib.contextmanager
def waiting(clock: WaitClock | None = None) -> Iterator[None]:
    """Count the time inside as waiting, on `clock` (default: the current one; none: nothing)."""
    clock = clock if clock is not None else current()
    if clock is None:
        yield
        return
    token = clock.start()
    try:
        yield
    finally:
        clock.stop(token)
