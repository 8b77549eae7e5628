"""Batching for in-process engines. The model runs in a worker thread, so the event loop (tool execution, env
steps) keeps running while it generates, and the requests of concurrent episodes share forward passes.

Two schedulers:
- `BatchQueue` (static): requests that wait while the engine is busy become the next engine call, which runs
  until its longest row ends; a request that arrives meanwhile waits for the whole call.
- `ContinuousBatcher`: a step loop over a `StepEngine` whose rows join and leave between any two decode
  steps; a request that arrives while others decode starts at the next step, a row that ends frees its slot
  at once, and a cancelled request's rows leave at the next step.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from toolgym.agents.sampling import Sample, SamplerError, SamplingParams


@dataclass
class Request:
    prompt: list[int]
    params: SamplingParams


RunBatch = Callable[[list[Request]], list["list[Sample] | BaseException"]]


class BatchQueue:
    """Collects requests while the engine is busy and hands them over as one batch when it frees up."""

    def __init__(self, run_batch: RunBatch, max_batch: int = 64) -> None:
        self._run_batch = run_batch
        self._max_batch = max_batch
        self._pending: list[tuple[Request, asyncio.Future, asyncio.AbstractEventLoop]] = []
        self._lock = threading.Lock()
        self._busy = False
        self._engine_lock = threading.Lock()  # one engine call at a time, across event loops too
        self.batch_sizes: list[int] = []  # requests per engine call, most recent last (observability)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No engine call runs inside this block (to change the model's weights between calls)."""
        with self._engine_lock:
            yield

    async def submit(self, prompt: list[int], params: SamplingParams) -> list[Sample]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future = loop.create_future()
        with self._lock:
            self._pending.append((Request(prompt, params), fut, loop))
            start = not self._busy
            if start:
                self._busy = True
        if start:
            try:  # let other episodes that become ready in this same loop iteration join the batch
                await asyncio.sleep(0)
            finally:  # even when this caller is cancelled there (a timeout): _busy is set, someone must drain
                threading.Thread(target=self._drain, name="toolgym-batch", daemon=True).start()
        return await fut

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._busy = False
                    return
                batch = self._pending[: self._max_batch]
                self._pending = self._pending[self._max_batch :]
            self.batch_sizes = (self.batch_sizes + [len(batch)])[-1000:]
            try:
                with self._engine_lock:
                    results = self._run_batch([r for r, _, _ in batch])
            except BaseException as exc:  # the engine failed for the whole batch: every caller hears it
                results = [exc] * len(batch)
            for (_, fut, loop), res in zip(batch, results, strict=True):
                try:
                    loop.call_soon_threadsafe(_settle, fut, res)
                except RuntimeError:  # that event loop has closed; nobody is waiting any more
                    pass


def _settle(fut: asyncio.Future, res: list[Sample] | BaseException) -> None:
    if fut.done():  # the caller gave up (episode wall-time limit)
        return
    if isinstance(res, BaseException):
        fut.set_exception(res)
    else:
        fut.set_result(res)


# -- continuous batching ---------------------------------------------------------------------------------------


class StepRow(Protocol):
    """One sampled sequence as the scheduler sees it (the engine owns everything else about it)."""

    ticket: Any
    error: BaseException | None

    @property
    def ended(self) -> bool: ...

    def sample(self) -> Sample: ...


class StepEngine(Protocol):
    """Rows decoding together; the scheduler calls it from one thread, between steps only."""

    rows: list[Any]  # the rows in the batch now

    def join(self, rows: list[Any]) -> None:
        """Prefill `rows` and give each its first token (a row that fails gets `.error`, the others go on)."""

    def step(self) -> None:
        """One more token for every row in the batch; raises when the whole step failed."""

    def leave(self, rows: list[Any]) -> None:
        """Drop `rows` from the batch (rows not in it are ignored)."""

    def reset(self) -> None:
        """Drop every row (after a failed step)."""


@dataclass(eq=False)
class _Ticket:
    future: concurrent.futures.Future
    rows: list[Any]
    left: int = field(init=False)

    def __post_init__(self) -> None:
        self.left = len(self.rows)

    @property
    def dead(self) -> bool:
        """Cancelled by its caller (an episode's time limit) or already failed: its rows can stop."""
        return self.future.done()


class ContinuousBatcher:
    """Runs `engine` step by step in a worker thread while it has rows or requests wait; at most `max_rows`
    rows decode at once. `make_rows` turns a request into its rows (one per sample) or raises for a bad one.

    `step_hook(step, rows)`, when set, is called on the worker thread after each step with the rows that got a
    token in it (instrumentation for tests and tracing; it must not block for long)."""

    def __init__(self, engine: StepEngine, make_rows: Callable[[Request], list[StepRow]], max_rows: int = 32) -> None:
        if max_rows < 1:
            raise ValueError("max_rows must be >= 1")
        self._engine = engine
        self._make_rows = make_rows
        self._max_rows = max_rows
        self._pending: deque[StepRow] = deque()
        self._lock = threading.Lock()
        self._running = False
        self._step_lock = threading.Lock()
        self.steps = 0
        self.batch_sizes: list[int] = []  # rows per decode step, most recent last (observability)
        self.step_hook: Callable[[int, list[StepRow]], None] | None = None

    async def submit(self, prompt: list[int], params: SamplingParams) -> list[Sample]:
        """`params.n` samples of `prompt`; cancelling the awaiting task takes its rows out of the batch."""
        fut = self.enqueue(prompt, params, start=False)
        try:  # let episodes that become ready in this same loop iteration prefill together with this one
            await asyncio.sleep(0)
        except BaseException:  # cancelled there (a time limit): its rows must not run for nobody
            fut.cancel()
            raise
        finally:  # the worker may be needed by rows queued by others meanwhile
            self._start()
        return await asyncio.wrap_future(fut)

    def enqueue(self, prompt: list[int], params: SamplingParams, *, start: bool = True) -> concurrent.futures.Future:
        """Thread-safe form of `submit`: returns a future (cancel it to give the request up)."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        try:
            rows = self._make_rows(Request(prompt, params))
        except Exception as exc:  # noqa: BLE001 - a bad request fails alone
            fut.set_exception(exc)
            return fut
        ticket = _Ticket(fut, rows)
        for r in rows:
            r.ticket = ticket
        with self._lock:
            self._pending.extend(rows)
        if start:
            self._start()
        return fut

    def _start(self) -> None:
        """Start the worker thread unless it runs (it stops when no row decodes and none waits)."""
        with self._lock:
            if self._running or not self._pending:
                return
            self._running = True
        threading.Thread(target=self._loop, name="toolgym-decode", daemon=True).start()

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No step runs inside this block (to change the model's weights between steps)."""
        with self._step_lock:
            yield

    # -- worker thread ------------------------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._lock:
                if not self._pending and not self._engine.rows:
                    self._running = False
                    return
            ended: list[Any] = []
            with self._step_lock:
                touched = self._step(ended)
            if touched and self.step_hook is not None:
                try:  # before the callers hear their results, so a trace is complete when they do
                    self.step_hook(self.steps, touched)
                except Exception:  # noqa: BLE001 - instrumentation must never stall the loop
                    pass
            self._settle(ended)

    def _step(self, ended: list[Any]) -> list[Any]:
        """Drop cancelled rows, admit waiting ones into free slots, decode one token for every row; rows that
        end go into `ended` (out of the batch already). Returns the rows that got a token."""
        eng = self._engine
        admit: list[Any] = []
        decoded: list[Any] = []
        try:
            gone = [r for r in eng.rows if r.ticket.dead]
            if gone:
                eng.leave(gone)
            with self._lock:
                while self._pending and len(admit) < self._max_rows - len(eng.rows):
                    r = self._pending.popleft()
                    if not r.ticket.dead:
                        admit.append(r)
            if not admit and not eng.rows:
                return []
            self.steps += 1
            if admit:
                eng.join(admit)
                self._retire(admit, ended)
            decoded = list(eng.rows)
            if decoded:
                self.batch_sizes = (self.batch_sizes + [len(decoded)])[-1000:]
                eng.step()
                self._retire(decoded, ended)
        except BaseException as exc:  # noqa: BLE001 - the step failed as a whole: its rows fail, later ones go on
            hit = [r for r in admit + list(eng.rows) if not r.ended]
            for r in hit:
                r.error = exc
            ended += [r for r in hit if r not in ended]
            with contextlib.suppress(BaseException):
                eng.reset()
        return admit + [r for r in decoded if r not in admit]

    def _retire(self, rows: list[Any], ended: list[Any]) -> None:
        out = [r for r in rows if r.ended]
        if out:
            ended += out  # first: a failing leave must not leave a caller waiting
            self._engine.leave(out)

    @staticmethod
    def _settle(rows: list[Any]) -> None:
        for r in rows:
            t: _Ticket = r.ticket
            t.left -= 1
            if r.error is not None:
                _resolve(t.future, exc=_engine_error(r.error))
            elif t.left == 0:
                _resolve(t.future, result=[x.sample() for x in t.rows])


def _resolve(fut: concurrent.futures.Future, *, result: Any = None, exc: BaseException | None = None) -> None:
    with contextlib.suppress(concurrent.futures.InvalidStateError):  # cancelled, or failed by an earlier row
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)


def _engine_error(exc: BaseException) -> BaseException:
    """Callers hear a SamplerError (the Sampler contract), with the engine's own exception as its cause."""
    if isinstance(exc, SamplerError):
        return exc
    err = SamplerError(f"the engine failed for this request: {type(exc).__name__}: {exc}")
    err.__cause__ = exc
    return err
