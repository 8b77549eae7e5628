"""Micro-batching for in-process engines: concurrent `agenerate` calls from many episodes are merged
into one engine call that runs in a worker thread, so the event loop (tool execution, env steps) keeps
running while the model generates, and episodes that are ready at the same time share a batch."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass

from toolgym.agents.sampling import Sample, SamplingParams


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
