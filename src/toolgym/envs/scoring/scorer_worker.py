"""A child interpreter for third-party scoring code, so that no scorer can stall the trainer.

A thread cannot interrupt a C call that holds the GIL: reasoning-gym's `coin_flip` scorer turns the
answer '1e-7000000' into a `Fraction`, one call that computes 10**7000000 for seconds (hours with
more digits), and in the trainer's process every episode on every thread stops meanwhile. So code
that scores model answers (reasoning-gym scorers, math-verify off the main thread) runs here: one
warm child per process, started on first use (never at `import toolgym`), spoken to in JSON lines
over pipes. It is a plain subprocess, not multiprocessing, so the user's `__main__` is never
re-imported.

Each call names a function of toolgym (`"toolgym.envs.x:fn"`) and JSON arguments, and has a wall
deadline of its own: past it the child is killed (`ScorerTimeout`, counted in `kills`) and the
next call starts a fresh one; a child that a call left over `RECYCLE_BYTES` resident is replaced
before the next call (what one answer leaves behind never reaches another). The child caps its address space and, per call, its CPU time (an
overrun kills it even if the parent is not watching), and keeps its stdin and stdout for the
protocol: a scorer that prints or reads writes to /dev/null. A call may name a `setup` call (load a
dataset, import a library) run once per child before it under its own, longer deadline; starting
the child and its setup are time spent for all episodes, so they are reported as waits
(`toolgym.sandbox.waiting`), not as the calling episode's own time.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

__all__ = ["ScorerTimeout", "ScorerFailed", "ScorerWorker", "worker", "in_worker"]

MEMORY_BYTES = 4 << 30  # the child's address space: far above any scorer's need, far below the host's
# a child whose resident memory has grown past this after a call is replaced before the next one: what an
# answer leaves behind (sympy's caches, the heap glibc keeps) never reaches later answers (round-8 red team
# r902: 40 answers like 2^{2^{28}} left the child at its address-space cap, and every later comparison met
# MemoryError, which math-verify takes for "not equal": honest answers scored 0 with no error)
RECYCLE_BYTES = 1 << 30
START_S = 120.0  # starting the child (imports included) on a busy host
_IN_CHILD = False


class ScorerTimeout(TimeoutError):
    """A scorer ran past its deadline; the child was killed (the next call starts a fresh one)."""


class ScorerFailed(RuntimeError):
    """A scorer failed in the child (its error, or the child died: out of memory or CPU time)."""


def in_worker() -> bool:
    """True inside the worker child: its scorers run in-process there (no worker of its own)."""
    return _IN_CHILD


class ScorerWorker:
    """The parent's handle on one child; thread-safe (calls are served one at a time)."""

    def __init__(self, *, memory_bytes: int = MEMORY_BYTES, recycle_bytes: int = RECYCLE_BYTES) -> None:
        self.memory_bytes, self.recycle_bytes = memory_bytes, recycle_bytes
        self.kills = 0  # children killed past a deadline (or found dead) since this handle was made
        self.recycled = 0  # children replaced after a call that left them over `recycle_bytes`
        self._lock = threading.Lock()
        self._proc: Any = None
        self._buf = b""
        self._ready: set[str] = set()  # setup calls done in the current child

    def call(self, fn: str, args: list[Any], *, deadline_s: float,
             setup: tuple[str, list[Any], float] | None = None) -> Any:
        """`fn(*args)` in the child, its result (JSON data). Raises `ScorerTimeout` past `deadline_s`,
        the child's exception when it is one of toolgym's (`ScorerRefused`, `ConfigError`), else
        `ScorerFailed`; an InfrastructureError when the child cannot be started at all."""
        from toolgym.sandbox.waiting import waiting

        with waiting():  # the worker is shared: time spent behind other episodes' answers is theirs
            self._lock.acquire()
        try:
            with waiting():  # a (re)start and a setup are everyone's cost, not this answer's
                if self._proc is None or self._proc.poll() is not None:
                    self._start()
                if setup is not None:
                    key = json.dumps([setup[0], setup[1]])
                    if key not in self._ready:
                        self._request(setup[0], setup[1], setup[2])
                        self._ready.add(key)
            return self._request(fn, args, deadline_s)
        finally:
            self._lock.release()

    def close(self) -> None:
        """Kill the child (a later call starts a new one)."""
        with self._lock:
            self._stop()

    # ------------------------------------------------------------------------------- internals

    def _start(self) -> None:
        import subprocess

        import toolgym
        from toolgym.errors import InfrastructureError

        self._stop()
        root = os.path.dirname(os.path.dirname(os.path.abspath(toolgym.__file__)))
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1",
                   PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
        # -c puts the working directory first on sys.path: dropped, so no file there shadows a module
        code = ("import sys; del sys.path[0]; from toolgym.envs.scoring.scorer_worker import serve; "
                f"serve({self.memory_bytes}, {self.recycle_bytes})")
        self._proc = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
            start_new_session=True,  # a Ctrl-C meant for the trainer does not kill its scorer mid-answer
        )
        try:
            self._read(START_S)
        except (ScorerTimeout, ScorerFailed) as exc:
            self._stop()
            raise InfrastructureError(f"the scorer worker did not start ({exc})") from None

    def _stop(self) -> None:
        proc, self._proc, self._buf = self._proc, None, b""
        self._ready.clear()
        if proc is not None:
            proc.kill()
            proc.wait(timeout=30)
            for f in (proc.stdin, proc.stdout):
                f.close()

    def _request(self, fn: str, args: list[Any], deadline_s: float) -> Any:
        from toolgym.envs.scoring.guard import ScorerRefused
        from toolgym.errors import ConfigError

        line = json.dumps({"fn": fn, "args": args, "cpu_s": deadline_s}).encode() + b"\n"
        try:
            self._proc.stdin.write(line)
            self._proc.stdin.flush()
            reply = self._read(deadline_s)
        except ScorerTimeout:
            self._stop()
            self.kills += 1
            raise ScorerTimeout(f"{fn} ran past its deadline of {deadline_s:g} s; its worker was killed "
                                "(a fresh one scores the next answer), this answer scores 0") from None
        except (OSError, ScorerFailed) as exc:  # the child died: out of memory or CPU time, say
            self._stop()
            self.kills += 1
            raise ScorerFailed(f"{fn}: the scorer worker died ({exc}); a fresh one scores the next answer, "
                               "this answer scores 0") from None
        if reply.get("recycle"):  # this answer's reply stands; the next one gets a fresh child
            self._stop()
            self.recycled += 1
        if "ok" in reply:
            return reply["ok"]
        kind, message = str(reply.get("error")), str(reply.get("message"))
        if kind == "ScorerRefused":
            raise ScorerRefused(message)
        if kind == "ConfigError":
            raise ConfigError(message)
        raise ScorerFailed(f"{kind}: {message}")

    def _read(self, deadline_s: float) -> dict[str, Any]:
        """One reply line within `deadline_s` of now."""
        import select
        import time

        end = time.monotonic() + deadline_s
        fd = self._proc.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        while b"\n" not in self._buf:
            rest = end - time.monotonic()
            if rest <= 0 or not poller.poll(max(1, int(rest * 1000))):
                raise ScorerTimeout(f"no reply within {deadline_s:g} s")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise ScorerFailed("its pipe closed: killed for memory or CPU time?")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            raise ScorerFailed("a reply that is not a JSON object")
        return reply


_WORKER: ScorerWorker | None = None
_WORKER_LOCK = threading.Lock()


def worker() -> ScorerWorker:
    """This process's worker (its child starts on the first call)."""
    global _WORKER
    if _WORKER is None:
        with _WORKER_LOCK:
            if _WORKER is None:
                _WORKER = ScorerWorker()
    return _WORKER


def _forget_after_fork() -> None:
    global _WORKER, _WORKER_LOCK
    _WORKER, _WORKER_LOCK = None, threading.Lock()  # the child is the parent's: a forked process starts its own


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


# ----------------------------------------------------------------------------------- the child

def _resident_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def serve(memory_bytes: int = MEMORY_BYTES, recycle_bytes: int = RECYCLE_BYTES) -> None:  # pragma: no cover
    """The child's loop: one JSON request a line on stdin, one JSON reply a line on stdout."""
    import importlib
    import math
    import resource

    global _IN_CHILD
    _IN_CHILD = True
    requests, replies = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    cpu_hard = resource.getrlimit(resource.RLIMIT_CPU)[1]

    replies.write(json.dumps({"ready": os.getpid()}).encode() + b"\n")
    replies.flush()
    for line in requests:
        try:
            req = json.loads(line)
            module, _, name = str(req["fn"]).partition(":")
            if not module.startswith("toolgym."):
                raise ValueError(f"not one of toolgym's functions: {req['fn']!r}")
            fn = getattr(importlib.import_module(module), name)
            usage = resource.getrusage(resource.RUSAGE_SELF)
            soft = int(usage.ru_utime + usage.ru_stime + math.ceil(float(req["cpu_s"]))) + 1
            if cpu_hard != resource.RLIM_INFINITY:
                soft = min(soft, cpu_hard)
            resource.setrlimit(resource.RLIMIT_CPU, (soft, cpu_hard))  # past it, SIGXCPU ends the child
            text = json.dumps({"ok": fn(*req["args"])})
        except BaseException as exc:  # noqa: BLE001 - a scorer's SystemExit is an answer too
            text = json.dumps({"error": type(exc).__name__, "message": " ".join(str(exc).split())[:2000]})
        if _resident_bytes() > recycle_bytes:
            text = text[:-1] + ', "recycle": true}'
        replies.write(text.encode() + b"\n")
        replies.flush()
