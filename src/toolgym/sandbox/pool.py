"""A warm pool of sandboxes (containers or local bubblewrap sandboxes).

Each worker serves one call at a time. A worker that misbehaves (OOM, dead executor,
leftover processes, full disk) is discarded and a fresh one is started in the
background, so the pool keeps its size. Waiting for a free worker never fails while some
worker serves a call (each call ends within its deadline): a slow pool-mate delays an
episode, it never fails it. A worker that a session holds (for as long as its episode lasts,
sampling included) does not count against the pool's size: the pool starts another, so no
call ever waits for a session to end; once the session ends, the pool shrinks back. Between its cells a
session runs nothing (its executor stops it); a cell in flight takes one of the pool's slots like a call
(`slot`), so no more than `size` calls and cells run at once.

Tenancy (see sandbox.tenancy): a call carries occupants, and a worker that has served a key for one
tenant never serves it for another. `acquire` takes an idle worker that fits; when none fits and the
pool is full, it retires an idle one (closed, not counted as discarded) and waits for a fresh one,
one start at a time for each caller that waits so.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from types import MappingProxyType
from typing import Any, Protocol

from toolgym.errors import SandboxUnavailable
from toolgym.sandbox.protocol import ChannelClosed
from toolgym.sandbox.tenancy import NONE, Occupants, absorb, conflict, with_carried
from toolgym.sandbox.waiting import WaitClock, waiting


class Worker(Protocol):
    def call(self, req: dict[str, Any], timeout: float) -> dict[str, Any]: ...
    def close(self) -> None: ...


class Pool:
    """Bounded set of workers; `acquire` blocks until one is idle (or can be started)."""

    def __init__(self, factory: Callable[[], Worker], size: int, warm: bool = True):
        if size < 1:
            raise ValueError(f"pool size must be >= 1, got {size}")
        self.factory, self.size = factory, size
        self._idle: deque[Worker] = deque()
        self._busy: set[int] = set()
        self._held: set[int] = set()  # busy workers that sessions keep (they come free only when it closes)
        self._all: list[Worker] = []
        self._starting = 0
        self._cells = 0  # sessions' cells in flight: each takes a slot, as a call does
        self._waiting = 0  # callers of acquire waiting for a worker
        self._unfit = 0  # of those, callers that an idle worker did not fit
        self._cond = threading.Condition()
        self._closed = False
        self.last_error: str | None = None
        self.discarded = 0
        self.retired = 0  # idle workers replaced because none fitted a call's occupants
        self._served: dict[int, dict[str, str]] = {}  # id(worker) -> key -> the tenant it served it for
        self.discard_reasons: dict[str, int] = {}
        if warm:
            for _ in range(size):
                self._start_async()

    # --------------------------------------------------------------- lifecycle of workers
    def _counted(self) -> int:
        """Workers that count against the size: live ones not held by a session, and those starting."""
        return len(self._all) - len(self._held) + self._starting

    def _running(self) -> int:
        """Calls and sessions' cells in flight: at most the pool's size."""
        return len(self._busy) - len(self._held) + self._cells

    @contextmanager
    def slot(self, clock: WaitClock | None = None) -> Iterator[None]:
        """One of the pool's slots for a session's cell (its worker is held outside the size): waits, on
        `clock`, while `size` calls and cells run; each ends within its own deadline."""
        with waiting(clock), self._cond:
            while self._running() >= self.size:
                if self._closed:
                    raise SandboxUnavailable("the sandbox is closed")
                self._cond.wait(1.0)
            self._cells += 1
        try:
            yield
        finally:
            with self._cond:
                self._cells -= 1
                self._cond.notify_all()

    def _start_async(self) -> None:
        with self._cond:
            if self._closed or self._counted() >= self.size:
                return
            self._starting += 1
        threading.Thread(target=self._start_one, daemon=True, name="toolgym-pool-start").start()

    def _start_one(self, attempts: int = 3) -> None:
        worker = None
        # configuration problems were caught when the backend was made; what fails here is
        # mostly transient (a loaded engine, a slow start): retry a few times
        for attempt in range(attempts):
            try:
                worker = self.factory()
                break
            except Exception as exc:  # noqa: BLE001 - reported to waiting callers
                with self._cond:
                    self.last_error = f"{type(exc).__name__}: {exc}"
                if self._closed:
                    break
                time.sleep(0.5 * (attempt + 1))
        with self._cond:
            self._starting -= 1
            if worker is not None and not self._closed:
                self._all.append(worker)
                self._idle.append(worker)
                self.last_error = None
                worker = None
            self._cond.notify_all()
        if worker is not None:  # pool closed while it started
            worker.close()

    def wait_ready(self, timeout: float = 120.0) -> None:
        """Block until every worker of the pool has started (for benchmarks and tests)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._idle) + len(self._busy) < self.size:
                if self._starting == 0 and len(self._all) < self.size:
                    self._cond.release()
                    try:
                        for _ in range(self.size - len(self._all)):
                            self._start_async()
                    finally:
                        self._cond.acquire()
                    if self.last_error and self._starting == 0:
                        raise SandboxUnavailable(f"cannot start a sandbox: {self.last_error}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise SandboxUnavailable(f"sandbox pool not ready after {timeout:.0f}s: {self.last_error}")
                self._cond.wait(min(left, 0.5))

    def acquire(self, timeout: float = 300.0, hold: bool = False, occupants: Occupants = NONE) -> Worker:
        """An idle worker (started if the pool has room). Waits while any worker serves a call, however
        long: a call ends within its own deadline, and no episode may fail for its pool-mates' slowness.
        SandboxUnavailable after `timeout` only when no worker can come free: none start, and all are
        held for sessions (`hold=True`: a session keeps its worker until it closes; the pool then starts
        another, see the module docstring). The worker fits `occupants` (see sandbox.tenancy)."""
        deadline = time.monotonic() + timeout
        occupants = with_carried(occupants)
        with self._cond:
            self._waiting += 1
            try:
                w = self._acquire(deadline, timeout, hold, occupants)
                self._serve(w, occupants)
                return w
            finally:
                self._waiting -= 1

    def _serve(self, w: Worker, occupants: Occupants) -> None:
        served = self._served.setdefault(id(w), {})
        served.update(occupants)
        absorb(occupants, served)

    def serve(self, w: Worker, occupants: Occupants) -> None:
        """A held worker (a session's) serves `occupants` again, with what they carry by now (an episode that
        entered other sandboxes since it took this one: see sandbox.tenancy). Never in conflict: the worker
        served no one else meanwhile, and the episode took nothing that conflicts with its own sandbox."""
        occupants = with_carried(occupants)
        with self._cond:
            self._serve(w, occupants)

    def _fitting(self, occupants: Occupants) -> Worker | None:
        for w in self._idle:
            if not conflict(self._served.get(id(w), {}), occupants):
                return w
        return None

    def idle_served(self) -> list[Mapping[str, str]]:
        """What each idle worker has served (key -> tenant), for a caller that forms a call to fit one of
        them (the judge's micro-batches): a call that fits no idle worker waits or costs a fresh sandbox.
        The pool's own maps, not copies (they grow with every key a worker serves): read them, by key only
        (they only grow, and a lookup is atomic, while another thread's acquire adds to them)."""
        with self._cond:
            return [MappingProxyType(self._served.get(id(w), {})) for w in self._idle]

    def _retire_idle(self) -> None:
        """No idle worker fits, the pool is full and none is starting: replace the idle worker at the head."""
        w = self._idle.popleft()
        self._all.remove(w)
        self._served.pop(id(w), None)
        self.retired += 1
        self._cond.release()
        try:
            threading.Thread(target=w.close, daemon=True, name="toolgym-pool-retire").start()
            self._start_async()
        finally:
            self._cond.acquire()

    def _acquire(self, deadline: float, timeout: float, hold: bool, occupants: Occupants) -> Worker:
        """`acquire`, under the pool's lock."""
        unfit = False  # counted in self._unfit while this caller waits for a worker that fits
        try:
            while True:
                if self._closed:
                    raise SandboxUnavailable("the sandbox is closed")
                w = self._fitting(occupants) if self._idle else None
                if w is not None and not hold and self._running() >= self.size:
                    self._wait_step(deadline, timeout)  # every slot runs a call or a cell: one ends soon
                    continue
                if w is not None:
                    self._idle.remove(w)
                    self._busy.add(id(w))
                    if hold:
                        self._held.add(id(w))
                    return w
                if not unfit and self._idle:
                    unfit = True
                    self._unfit += 1
                # one fresh sandbox starting for each caller that no idle worker fits, at once (not one by one):
                # a start costs less than waiting for a busy worker's call (the judge's micro-batches are
                # formed to fit an idle worker, see judging._Batcher, so this is rare in a step)
                if self._idle and self._counted() >= self.size and self._starting < self._unfit:
                    self._retire_idle()
                    continue
                self._wait_step(deadline, timeout)
        finally:
            self._unfit -= int(unfit)

    def _wait_step(self, deadline: float, timeout: float) -> None:
        """Start a worker if the pool has room, else wait a little for one to come free (under the lock)."""
        if self._counted() < self.size:
            self._cond.release()
            try:
                self._start_async()
            finally:
                self._cond.acquire()
        elif self._starting == 0 and self.last_error and not self._all:
            raise SandboxUnavailable(f"cannot start a sandbox: {self.last_error}")
        left = deadline - time.monotonic()
        if left <= 0 and not (self._busy - self._held) and not self._starting and not self._cells:
            raise SandboxUnavailable(f"no sandbox became free in {timeout:.0f}s (every one is held by a "
                                     f"session): {self.last_error}")
        self._cond.wait(min(left, 1.0) if left > 0 else 1.0)
        if self.last_error and self._starting == 0 and not self._all and not self._idle:
            raise SandboxUnavailable(f"cannot start a sandbox: {self.last_error}")

    def release(self, worker: Worker, healthy: bool = True, reason: str = "") -> None:
        with self._cond:
            if not healthy and not self._closed:
                key = reason or "unhealthy"
                self.discard_reasons[key] = self.discard_reasons.get(key, 0) + 1
            self._busy.discard(id(worker))
            self._held.discard(id(worker))
            self._cond.notify_all()  # a slot came free
            # beyond the pool's size (it grew while sessions held workers), and no caller waits: shrink back
            surplus = healthy and self._counted() > self.size and not self._waiting
            if healthy and not self._closed and not surplus:
                self._idle.append(worker)
                return
            if worker in self._all:
                self._all.remove(worker)
            self._served.pop(id(worker), None)
            self.discarded += int(not self._closed and not surplus)
            self._cond.notify_all()
        threading.Thread(target=worker.close, daemon=True, name="toolgym-pool-discard").start()
        self._start_async()

    def call(self, req: dict[str, Any], timeout: float, clock: WaitClock | None = None,
             occupants: Occupants = NONE) -> dict[str, Any]:
        """One request on one worker that fits `occupants`; discards the worker on a fault or an unhealthy
        reply. Waiting for a free worker counts on `clock` (default: the current context's, see
        sandbox.waiting)."""
        with waiting(clock):
            worker = self.acquire(occupants=occupants)
        healthy, reason = False, "executor fault"
        try:
            resp = worker.call(req, timeout)
            health = resp.get("health") or {"healthy": True}
            healthy = bool(health.get("healthy", True)) and not resp.get("fault")
            reason = health.get("reason") or ("executor fault" if resp.get("fault") else "")
            return resp
        except ChannelClosed as exc:
            reason = "channel: " + str(exc)
            return {"ok": False, "error": f"sandbox died: {exc}", "fault": True}
        finally:
            self.release(worker, healthy, reason)

    def stats(self) -> dict[str, Any]:
        with self._cond:
            return {"size": self.size, "live": len(self._all), "idle": len(self._idle),
                    "busy": len(self._busy), "held": len(self._held), "cells": self._cells, "starting": self._starting, "discarded": self.discarded, "retired": self.retired,
                    "discard_reasons": dict(self.discard_reasons)}

    def close(self) -> None:
        with self._cond:
            self._closed = True
            workers, self._all = list(self._all), []
            self._idle.clear()
            self._served.clear()
            self._cond.notify_all()
        threads = [threading.Thread(target=w.close, daemon=True) for w in workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        # wait for starters still running, they close their worker themselves
        deadline = time.monotonic() + 30
        with self._cond:
            while self._starting and time.monotonic() < deadline:
                self._cond.wait(0.2)
