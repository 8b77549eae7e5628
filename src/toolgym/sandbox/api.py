"""`open_sandbox`: one interface over the docker and local backends.

A Sandbox owns a warm pool of workers; `run` takes one for a call, `session` holds
one for a stateful interpreter. Everything untrusted happens inside the executor;
this side only validates requests and turns replies into ExecResults.

Whose fault a failed sandbox is: when a call's sandbox fails (the executor dies, stalls past
its deadline, or reports a fault), the worker is replaced and the call runs once more on a
fresh sandbox (a sandbox may die under a call for reasons of its own: a killed container).
If it fails there too, a control run on a sandbox of its own (started for it, outside the pool)
decides. If the control run works,
the failure is the call's own: it gets a result (status `killed`, or `timeout` for a stall),
like any program that crashed. If the control run fails too, no program caused it:
`SandboxUnavailable` (an InfrastructureError) is raised.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import os
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any, Literal

from toolgym._registry import Registry
from toolgym.errors import SandboxUnavailable, ToolgymError
from toolgym.sandbox import tenancy, waiting
from toolgym.sandbox.pool import Pool
from toolgym.sandbox.types import ExecResult, Limits

LANGUAGES = ("python", "cpp", "bash")
MAX_INPUT_BYTES = 64 << 20
# the start of the stderr of a call whose own program made its sandbox fail (the judge reads it)
SANDBOX_FAILED = "[toolgym] this call made its sandbox fail"
_OPEN: weakref.WeakSet[Sandbox] = weakref.WeakSet()


class SandboxRequestError(ToolgymError, ValueError):
    """A call the sandbox refuses: unknown language, bad file name, oversized input."""


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not name or name.startswith("/") or "\x00" in name \
            or ".." in name.split("/"):
        raise SandboxRequestError(f"file name {name!r} must be a relative path inside the work dir")


def _limits_dict(limits: Limits) -> dict[str, Any]:
    return {k: v for k, v in asdict(limits).items() if v is not None}


def _result(resp: dict[str, Any], t0: float) -> ExecResult:
    if not resp.get("ok"):
        return ExecResult(stderr=str(resp.get("error", "sandbox error")), status="sandbox_error",
                          duration_s=time.monotonic() - t0)
    r = resp["result"]
    files = {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in (r.get("files") or {}).items()}
    return ExecResult(stdout=r["stdout"], stderr=r["stderr"], exit_code=r["exit_code"], status=r["status"],
                      duration_s=float(r["duration_s"]), stdout_truncated=bool(r["stdout_truncated"]),
                      stderr_truncated=bool(r["stderr_truncated"]), files=files)


def _encode_files(files: dict[str, str | bytes] | None) -> dict[str, str]:
    out, total = {}, 0
    for name, data in (files or {}).items():
        _check_name(name)
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        total += len(raw)
        if total > MAX_INPUT_BYTES:
            raise SandboxRequestError(f"input files exceed {MAX_INPUT_BYTES >> 20} MiB")
        out[name] = base64.b64encode(raw).decode()
    return out


class Session:
    """A persistent Python interpreter on one worker; variables survive between calls.

    A call that times out (or dies) kills the interpreter; the next call starts a fresh
    one and `state_lost` says so."""

    def __init__(self, sandbox: Sandbox, limits: Limits):
        self.sandbox, self.limits = sandbox, limits
        self._occupants = tenancy.occupants_now()
        with waiting.waiting():
            self._worker = sandbox._pool.acquire(hold=True, occupants=self._occupants)
        self._healthy = True
        self._reset = False
        self.state_lost = False
        self.restarts = 0
        self._lock = threading.Lock()

    def run(self, code: str, stdin: str = "", limits: Limits | None = None) -> ExecResult:
        return self._run(code, stdin, limits, waiting.current())

    def _run(self, code: str, stdin: str, limits: Limits | None, clock: waiting.WaitClock | None) -> ExecResult:
        from toolgym.sandbox.protocol import ChannelClosed

        lim = limits or self.limits
        t0 = time.monotonic()
        with self._lock:
            if self._worker is None:
                raise SandboxUnavailable("the session is closed")
            req = {"op": "session_run", "code": code, "stdin": stdin, "limits": _limits_dict(lim)}
            if self._reset:
                req["reset"], self._reset = True, False
            # the episode may have entered other sandboxes since this one: it serves what the episode carries now
            self.sandbox._pool.serve(self._worker, self._occupants)
            lost = False
            for _attempt in range(2):  # a sandbox that fails: the cell once more, on a fresh one (its state is lost)
                try:
                    with self.sandbox._pool.slot(clock):
                        resp = self._worker.call(req, lim.timeout_s + 30)
                except ChannelClosed as exc:
                    resp = {"ok": False, "error": f"sandbox died: {exc}", "fault": True}
                if not resp.get("fault"):
                    break
                self._replace_worker(clock)
                lost = True
            if resp.get("fault"):
                self.state_lost = True
                self.restarts += 1
                return self.sandbox._blame(resp, t0, clock)
            if lost:
                resp["state_lost"] = True
        res = _result(resp, t0)
        if not (resp.get("health") or {}).get("healthy", True):
            self._replace_worker(clock)
            resp["state_lost"] = True
        self.state_lost = bool(resp.get("state_lost"))
        if self.state_lost:
            self.restarts += 1
            res.stderr += "\n[toolgym] the session interpreter was restarted: its state was lost\n"
        return res

    async def arun(self, code: str, stdin: str = "", limits: Limits | None = None) -> ExecResult:
        return await self.sandbox._in_thread(lambda clock: self._run(code, stdin, limits, clock))

    def reset(self) -> None:
        """Forget every variable: the next call starts a fresh interpreter."""
        self._reset = True

    def _replace_worker(self, clock: waiting.WaitClock | None = None) -> None:
        self.sandbox._pool.release(self._worker, healthy=False)
        with waiting.waiting(clock):
            self._worker = self.sandbox._pool.acquire(hold=True, occupants=self._occupants)

    def close(self) -> None:
        from toolgym.sandbox.protocol import ChannelClosed

        w, self._worker = self._worker, None
        if w is None:
            return
        healthy = True
        try:
            resp = w.call({"op": "session_stop"}, 30)
            healthy = bool((resp.get("health") or {}).get("healthy", False))
        except ChannelClosed:
            healthy = False
        self.sandbox._pool.release(w, healthy)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Sandbox:
    """A pool of sandboxes of one backend. Use `open_sandbox` to make one."""

    def __init__(self, backend: Any, limits: Limits, pool_size: int, warm: bool = True):
        self.backend_impl = backend
        self.backend: str = backend.name
        self.limits = limits
        self._pool = Pool(backend.new_worker, pool_size, warm=warm)
        self._threads = ThreadPoolExecutor(max_workers=max(4, 2 * pool_size), thread_name_prefix="toolgym-sbx")
        self._closed = False
        _OPEN.add(self)

    # ---------------------------------------------------------------- calls
    def _request(self, code: str, language: str, stdin: str, files, limits: Limits, return_files, argv,
                 trusted: bool = False):
        if language not in LANGUAGES:
            raise SandboxRequestError(f"unknown language {language!r}; choose one of {', '.join(LANGUAGES)}")
        if not isinstance(code, str):
            raise SandboxRequestError(f"code must be a str, got {type(code).__name__}")
        for name in return_files or []:
            _check_name(name)
        return {"op": "run", "language": language, "code": code, "stdin": stdin or "",
                "files": _encode_files(files), "limits": _limits_dict(limits),
                "return_files": list(return_files or []), "argv": [str(a) for a in (argv or [])],
                "trusted": bool(trusted)}

    def run(self, code: str, language: str = "python", stdin: str = "", *,
            files: dict[str, str | bytes] | None = None, limits: Limits | None = None,
            return_files: list[str] | None = None, argv: list[str] | None = None,
            trusted: bool = False, retry: bool = True, occupants: tenancy.Occupants | None = None) -> ExecResult:
        """Run one program in a fresh work dir of a pooled sandbox; never raises for bad code (a
        program that makes its sandbox fail gets status `killed` or `timeout`; SandboxUnavailable
        only when a control run fails too, see the module docstring). `retry=False`: no second run
        on a fresh sandbox (the judge's micro-batches, whose jobs are judged again alone instead).

        `trusted` is for toolgym's own judge harness only: the program then runs as the
        sandbox's root (it starts the test processes under untrusted uids itself). Never pass
        it with code a model wrote. `occupants`: whose call this is (default: the current episode's, see
        sandbox.tenancy); the judge passes its jobs'."""
        return self._run(code, language, stdin, files=files, limits=limits, return_files=return_files, argv=argv,
                         trusted=trusted, retry=retry, clock=waiting.current(),
                         occupants=tenancy.occupants_now() if occupants is None else occupants)

    def _run(self, code: str, language: str, stdin: str, *, files: dict[str, str | bytes] | None = None,
             limits: Limits | None = None, return_files: list[str] | None = None, argv: list[str] | None = None,
             trusted: bool = False, retry: bool = True, clock: waiting.WaitClock | None = None,
             occupants: tenancy.Occupants = tenancy.NONE) -> ExecResult:
        lim = limits or self.limits
        req = self._request(code, language, stdin, files, lim, return_files, argv, trusted)
        t0 = time.monotonic()
        # the executor answers by itself at the limit; this host-side bound only catches a
        # hung sandbox (cleanup of a fork bomb under CPU throttling takes a while)
        slack = 60.0 + lim.timeout_s + (60.0 if language == "cpp" else 0.0)
        resp = self._pool.call(req, lim.timeout_s + slack, clock, occupants)
        if resp.get("fault") and retry:  # once more, on a fresh sandbox: the failure may not be the call's
            resp = self._pool.call(req, lim.timeout_s + slack, clock, occupants)
        if resp.get("fault"):
            return self._blame(resp, t0, clock)
        return _result(resp, t0)

    def _blame(self, resp: dict[str, Any], t0: float, clock: waiting.WaitClock | None) -> ExecResult:
        """A call's sandbox failed twice (each was replaced): a control run on a sandbox of its own (started
        for it, outside the pool: it never waits for a worker, e.g. one a session holds) says whose fault
        that was. Works: the call's own (status killed, or timeout for a stall). Fails: raise."""
        why = str(resp.get("error") or "sandbox fault")
        control = self._control_run(clock)
        if control.get("fault") or not control.get("ok") or (control.get("result") or {}).get("stdout") != "ok\n":
            raise SandboxUnavailable(f"the sandbox failed ({why}), and so did a control run on another one "
                                     f"({control.get('error') or (control.get('result') or {}).get('status')})")
        stalled = "did not answer in time" in why
        return ExecResult(stderr=f"{SANDBOX_FAILED} ({why}); it was replaced", status="timeout" if stalled else "killed",
                          duration_s=time.monotonic() - t0)

    def _control_run(self, clock: waiting.WaitClock | None) -> dict[str, Any]:
        """print('ok') on a fresh sandbox of this backend, closed afterwards; its start and run are waiting
        (no episode's own time). A sandbox that cannot start is a failed control run."""
        from toolgym.sandbox.protocol import ChannelClosed

        req = {"op": "run", "language": "python", "code": "print('ok')", "stdin": "", "files": {},
               "limits": _limits_dict(self.limits), "return_files": [], "argv": [], "trusted": False}
        with waiting.waiting(clock):
            try:
                worker = self.backend_impl.new_worker()
            except Exception as exc:  # noqa: BLE001 - the engine or host failed: reported as such
                return {"ok": False, "fault": True, "error": f"cannot start a sandbox: {type(exc).__name__}: {exc}"}
            try:
                return worker.call(req, self.limits.timeout_s + 60.0)
            except ChannelClosed as exc:
                return {"ok": False, "fault": True, "error": f"sandbox died: {exc}"}
            finally:
                threading.Thread(target=worker.close, daemon=True, name="toolgym-control-close").start()

    async def _in_thread(self, fn: Any) -> Any:
        """fn(clock) on a worker thread: the asyncio loop is never blocked; the wait for a free thread,
        like the wait for a free sandbox, counts on the caller's wait clock."""
        clock = waiting.current()
        token = clock.start() if clock is not None else None

        def call() -> Any:
            if token is not None:
                clock.stop(token)
            return fn(clock)

        try:
            return await asyncio.get_running_loop().run_in_executor(self._threads, call)
        finally:
            if token is not None:
                clock.stop(token)

    async def arun(self, code: str, language: str = "python", stdin: str = "", **kw: Any) -> ExecResult:
        """`run` on a worker thread: the asyncio loop is never blocked."""
        if kw.get("occupants") is None:
            kw["occupants"] = tenancy.occupants_now()  # here: the worker thread does not see this context
        return await self._in_thread(lambda clock: self._run(code, language, stdin, clock=clock, **kw))

    def session(self, limits: Limits | None = None) -> Session:
        """A stateful Python interpreter holding one worker until closed."""
        return Session(self, limits or self.limits)

    def raw_call(self, req: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        """Send a raw protocol request (tests of malformed requests use it)."""
        return self._pool.call(req, timeout)

    def wait_ready(self, timeout: float = 120.0) -> Sandbox:
        self._pool.wait_ready(timeout)
        return self

    def stats(self) -> dict[str, Any]:
        return self._pool.stats()

    # ---------------------------------------------------------------- lifecycle
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.close()
        self._threads.shutdown(wait=False)
        self.backend_impl.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close_all() -> None:
    for sb in list(_OPEN):
        try:
            sb.close()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass


atexit.register(_close_all)


#: sandbox backends by name: a class (or factory) called as ``cls(limits, image=image)`` whose instance has
#: ``name``, ``new_worker()`` and ``close()``; others come through the entry-point group
#: ``toolgym.sandbox_backends``. "auto" is not one: it picks docker or local (:func:`doctor.pick_backend`).
BACKENDS: Registry[Any] = Registry("sandbox backend", "toolgym.sandbox_backends", error=SandboxRequestError,
                                   accepts=callable)
BACKENDS.add("docker", "toolgym.sandbox.docker_backend:DockerBackend", lazy=True)
BACKENDS.add("local", "toolgym.sandbox.local_backend:LocalBackend", lazy=True)


def make_backend(backend: str, limits: Limits, image: str | None = None, runtime: str | None = None,
                 pin_image: bool | None = None):
    """A backend instance by name ("auto" picks one that runs here); `runtime` (an OCI runtime such as runsc)
    and `pin_image` (the image held in host memory, toolgym.sandbox.image_pin) are the docker backend's."""
    if backend == "auto":
        from toolgym.sandbox.doctor import pick_backend

        backend = pick_backend()["backend"]
    cls = BACKENDS.find(backend, known=("auto", *BACKENDS))
    if runtime is None and pin_image is None:
        return cls(limits, image=image)
    if backend != "docker":
        what = f"runtime={runtime!r}" if runtime is not None else f"pin_image={pin_image!r}"
        raise SandboxRequestError(f"{what} is the docker backend's (an OCI runtime such as runsc; the image held "
                                  f"in memory); backend {backend!r} takes none")
    return cls(limits, image=image, runtime=runtime, pin_image=pin_image)


def open_sandbox(backend: Literal["auto", "docker", "local"] | str = "auto", limits: Limits | None = None,
                 pool_size: int | None = None, *, image: str | None = None, warm: bool = True,
                 runtime: str | None = None, pin_image: bool | None = None) -> Sandbox:
    """Open a pool of sandboxes. pool_size defaults to the number of CPU cores (env TOOLGYM_POOL_SIZE);
    runtime is the Docker backend's OCI runtime ("runsc": gVisor; env TOOLGYM_SANDBOX_RUNTIME); pin_image holds
    the image in host memory (default: under runsc only; env TOOLGYM_SANDBOX_PIN_IMAGE)."""
    limits = limits or Limits()
    size = pool_size or int(os.environ.get("TOOLGYM_POOL_SIZE", "0")) or os.cpu_count() or 1
    return Sandbox(make_backend(backend, limits, image, runtime, pin_image), limits, size, warm=warm)
