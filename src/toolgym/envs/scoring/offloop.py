"""Run a synchronous reward function off the event loop, bounded by its own time.

A sync reward function called on the rollout loop's thread freezes every episode on that loop for as
long as it runs (math-verify on `\\boxed{9^{9^{9}}}` takes seconds), and a frozen loop's time counts
as each batch-mate's own environment time. So each call runs on a thread of its own (no shared pool
whose slots a slow scorer could hold), and the caller waits on the loop. Its bound is its own time:
waits it reports (a free sandbox, a shared verifier worker, batch-mates) are left out, here and on
the episode's clock, so another episode's answer can never run a reward function over its bound.
A call over its bound raises `RewardTimeout` (the rubric scores that component 0); its thread is
left to finish on its own (a daemon thread: it never holds up the interpreter's exit).
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Callable
from typing import Any

from toolgym.sandbox import waiting

__all__ = ["RewardTimeout", "call_off_loop"]


class RewardTimeout(TimeoutError):
    """A sync reward function ran over its own time bound; the answer scores 0 for it."""


async def call_off_loop(fn: Callable[..., Any], kwargs: dict[str, Any], timeout_s: float | None) -> Any:
    """`fn(**kwargs)` on a new thread (the caller's context, a child wait clock), awaited on the loop."""
    loop = asyncio.get_running_loop()
    result: asyncio.Future[Any] = loop.create_future()
    clock = waiting.WaitClock(parent=waiting.current())
    ctx = contextvars.copy_context()
    name = getattr(fn, "__name__", "reward")

    def settle(ok: bool, value: Any) -> None:
        if not result.done():
            (result.set_result if ok else result.set_exception)(value)

    def run() -> Any:
        with waiting.measuring(clock):
            return fn(**kwargs)

    def work() -> None:
        try:
            out, ok = ctx.run(run), True
        except BaseException as exc:  # noqa: BLE001 - SystemExit in a scorer must not leave the caller waiting
            out, ok = (exc if isinstance(exc, Exception) else RuntimeError(f"{type(exc).__name__} in {name}")), False
        try:
            loop.call_soon_threadsafe(settle, ok, out)
        except RuntimeError:  # the loop is gone: nobody waits for this answer any more
            pass

    threading.Thread(target=work, name=f"toolgym-reward-{name}", daemon=True).start()
    began = time.perf_counter()
    while not result.done():
        if timeout_s is None:
            await asyncio.wait({result})
            break
        rest = timeout_s - (time.perf_counter() - began - clock.seconds)
        if rest <= 0:
            raise RewardTimeout(f"{name} ran over its bound of {timeout_s:g} s of its own time; scored 0")
        await asyncio.wait({result}, timeout=rest)
    return result.result()
