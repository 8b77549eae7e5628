"""The child side of :class:`~toolgym.distributed.local_pool.LocalRolloutPool`: one process, one RolloutWorker.

The process serves its pipe on an asyncio loop: groups run concurrently as tasks (their generation requests
meet in the sampler's batching queue), weights load between them. Messages, parent to child: ``("load",
version, SharedWeights | None)`` (None: the version label only, for a worker that samples from servers), ``("run", ticket, pickled job)``, ``("info",)``, ``("close",)``; child to parent:
``("ready", info)`` or ``("init_failed", line)``, ``("loaded", version)`` or ``("load_failed", version, line)``, ``("result", ticket, group)``,
``("error", ticket, line)``, ``("info", info)``, ``("closed",)``.

It ignores SIGINT (Ctrl-C reaches the whole process group; the trainer handles it and closes the pool) and
asks the kernel to SIGKILL it when its parent dies (``PR_SET_PDEATHSIG``), so a trainer killed with ``kill -9``
leaves no worker behind, even one stuck in a reward function that never returns to the interpreter loop.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import sys
from typing import Any

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """SIGKILL this process when the thread that started it ends (Linux); exit now if that already happened."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the pipe's end-of-file still stops an idle worker
        pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}".rstrip(": ")


def child_main(slot: int, conn: Any, parent_pid: int, model_config: Any, tokenizer: Any,
               worker_kw: dict[str, Any]) -> None:
    """Entry point of a worker process (``multiprocessing`` spawn target)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # the spawner thread started it blocked
    die_with_parent(parent_pid)
    try:
        from toolgym.distributed.worker import RolloutWorker

        try:
            msg = conn.recv()  # the initial weights (a shared-memory handle)
        except (EOFError, OSError):  # the parent is gone
            return
        _, version, shared = msg
        weights = shared.tensors() if shared is not None else None  # None: a client of servers, no weights
        worker = RolloutWorker(slot, model_config, tokenizer, weights, version, **worker_kw)
        del weights, shared, msg  # the views pin the parent's shared buffer
    except Exception as exc:
        conn.send(("init_failed", one_line(exc)))
        return
    conn.send(("ready", worker.info()))
    # not asyncio.run: its shutdown joins the loop's threads, and one stuck in an environment call (a reward
    # function that never returns) would keep the worker alive; once it is closed, the process just ends
    asyncio.new_event_loop().run_until_complete(_serve(worker, conn))
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


async def _serve(worker: Any, conn: Any) -> None:
    loop = asyncio.get_running_loop()
    stop: asyncio.Future[None] = loop.create_future()
    tasks: set[asyncio.Task[None]] = set()

    async def run(ticket: int, blob: bytes) -> None:
        try:  # a job's env may name a module that only the parent can import (its __main__)
            job = pickle.loads(blob)
        except Exception as exc:
            conn.send(("error", ticket, f"the job cannot be read in the worker process: {one_line(exc)}"))
            return
        try:
            group = await worker.run_group(job, None)
        except Exception as exc:
            conn.send(("error", ticket, one_line(exc)))
            return
        conn.send(("result", ticket, group))

    def handle(msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "run":
            task = loop.create_task(run(msg[1], msg[2]))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        elif kind == "load":
            shared = msg[2]
            try:
                worker.load_weights(msg[1], shared.tensors() if shared is not None else None)
            except Exception as exc:
                conn.send(("load_failed", msg[1], one_line(exc)))
                return
            finally:
                del shared
            conn.send(("loaded", msg[1]))
        elif kind == "info":
            conn.send(("info", worker.info()))
        elif kind == "close" and not stop.done():
            stop.set_result(None)

    def readable() -> None:
        try:
            while conn.poll():
                handle(conn.recv())
        except (EOFError, OSError):  # the parent is gone
            loop.remove_reader(conn.fileno())
            if not stop.done():
                stop.set_result(None)

    loop.add_reader(conn.fileno(), readable)
    await stop
    loop.remove_reader(conn.fileno())
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    try:
        worker.close()
    finally:
        try:
            conn.send(("closed",))
        except OSError:
            pass
