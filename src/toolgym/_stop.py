"""Stopping on SIGINT and SIGTERM: the long commands (train, rollout, bench) keep what is done and say how to go on.

``signals()`` turns both signals into :class:`Stopped`, a ``KeyboardInterrupt``, so code that keeps its work on
Ctrl-C keeps it on a scheduler's SIGTERM too. ``held()`` marks work that must not be cut halfway (an optimizer
update: half-updated weights cannot be saved as any step); a signal inside it is raised when it ends.
``released()`` opens a held stretch again for work that may be cut anywhere (sampling rollouts). A second signal
while the first is being handled (a checkpoint being written) exits at once.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(KeyboardInterrupt):
    """A SIGINT or SIGTERM under :func:`signals`; ``exit_code`` is the shell's 128 + signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.name = signal.Signals(signum).name
        self.exit_code = 128 + signum
        self.info: dict[str, Any] = {}  # what the interrupted work kept (e.g. the trainer's saved step)


class _State:
    def __init__(self) -> None:
        self.hold = 0
        self.pending: int | None = None
        self.stopping = False


_state = _State()


def _handler(signum: int, _frame: Any) -> None:
    if _state.stopping:  # the first signal's work is being saved: a second one means "now"
        os.write(2, f"\n{signal.Signals(signum).name} again: exiting without waiting\n".encode())
        os._exit(128 + signum)
    if _state.hold:
        _state.pending = signum
        return
    _state.stopping = True
    raise Stopped(signum)


@contextmanager
def signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`Stopped` inside the block (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _handler) for s in _SIGNALS}
    _state.__init__()
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        _state.__init__()


@contextmanager
def held() -> Iterator[None]:
    """A signal that arrives inside the block is raised when it ends (when the block itself raises, that wins)."""
    _state.hold += 1
    try:
        yield
    finally:
        _state.hold -= 1
    _raise_pending()


@contextmanager
def released() -> Iterator[None]:
    """Inside a :func:`held` block, work a signal may cut at once (one already pending is raised on entry)."""
    saved, _state.hold = _state.hold, 0
    try:
        _raise_pending()
        yield
    finally:
        _state.hold = saved


def _raise_pending() -> None:
    if not _state.hold and _state.pending is not None:
        signum, _state.pending = _state.pending, None
        _state.stopping = True
        raise Stopped(signum)


def command_line(add: Sequence[str] = ()) -> str:
    """This process's ``toolgym ...`` command as the user typed it (shell-quoted), plus ``add`` flags it lacks."""
    args = list(sys.argv[1:])
    args += [a for a in add if a not in args]
    return shlex.join(["toolgym", *args])
