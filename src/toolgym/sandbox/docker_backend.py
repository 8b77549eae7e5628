"""Docker backend: one locked-down container per pool worker, driven through the executor.

Each container: no network, no-new-privileges, Docker's default seccomp profile, read-only
root, size-capped tmpfs for /work and /tmp, a private IPC namespace, memory = memory+swap
limit, pids limit, CPU quota, no host mounts, no container log (log driver "none": the
stream carries hidden expected outputs), toolgym labels. The executor is PID 1, starts
as the container's root with only the six capabilities it needs to hand out uids, and
runs every untrusted program as uid 65534 (see executor.py); it refuses to serve when
any of this does not hold. It talks over the container's attached stdin/stdout: one
persistent stream per container.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from typing import Any

from toolgym.errors import SandboxUnavailable
from toolgym.sandbox.backend import Backend, Worker
from toolgym.sandbox.protocol import Channel, ChannelClosed, executor_source
from toolgym.sandbox.types import OWN_PIDS, Limits
from toolgym.sandbox.uids import new_base

LABEL = "toolgym.sandbox"
# What the executor needs to run calls under other uids and clean up after them (executor.CAPS).
EXECUTOR_CAPS = ("SETUID", "SETGID", "KILL", "CHOWN", "DAC_OVERRIDE", "FOWNER")
_REAPED = False
_REAP_LOCK = threading.Lock()


def _proc_start(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def owner_labels() -> dict[str, str]:
    """Labels that say which process owns a container, so orphans can be told apart."""
    pid = os.getpid()
    return {LABEL: "1", "toolgym.host": socket.gethostname(), "toolgym.pid": str(pid),
            "toolgym.pid_start": _proc_start(pid)}


def _owner_alive(labels: dict[str, str]) -> bool:
    if labels.get("toolgym.host") != socket.gethostname():
        return True  # another machine's: not ours to judge
    try:
        pid = int(labels.get("toolgym.pid", "0"))
    except ValueError:
        return False
    if pid <= 0 or not os.path.exists(f"/proc/{pid}"):
        return False
    return _proc_start(pid) == labels.get("toolgym.pid_start", "")


def reap_orphans(client) -> int:
    """Remove toolgym containers whose owning process is gone (a crashed run)."""
    n = 0
    for c in client.containers.list(all=True, filters={"label": LABEL}, ignore_removed=True):
        if not _owner_alive(c.labels or {}):
            try:
                c.remove(force=True)
                n += 1
            except Exception:  # noqa: BLE001 - already gone
                pass
    return n


def connect(timeout: float = 120.0):
    """A docker client, or SandboxUnavailable saying why not. The timeout is per API call:
    container create/start can take many seconds on a loaded engine."""
    try:
        import docker

        client = docker.from_env(timeout=timeout)
        client.ping()
        return client
    except Exception as exc:  # noqa: BLE001
        raise SandboxUnavailable(
            f"no Docker engine reachable ({type(exc).__name__}); start dockerd or use backend='local'") from exc


def runtime_choice(runtime: str | None = None) -> str | None:
    """The OCI runtime sandboxes run under: `runtime`, else env TOOLGYM_SANDBOX_RUNTIME, else the engine's
    default (runc). "runsc" gives each sandbox a kernel of its own (gVisor)."""
    return runtime or os.environ.get("TOOLGYM_SANDBOX_RUNTIME") or None


def _check_runtime(client, runtime: str | None) -> str | None:
    runtime = runtime_choice(runtime)
    if runtime is None:
        return None
    try:
        known = sorted((client.info().get("Runtimes") or {}).keys())
    except Exception:  # noqa: BLE001 - the engine says so itself when the container is created
        return runtime
    if runtime not in known:
        raise SandboxUnavailable(
            f"the Docker engine has no runtime {runtime!r} (it has {', '.join(known) or 'none'}); "
            "run scripts/setup.sh to install and register gVisor's runsc, or unset TOOLGYM_SANDBOX_RUNTIME")
    return runtime


# Under gVisor the container's pids cgroup holds the runtime too: its Go threads and, on the ptrace
# platform, a host stub process (and threads) per sandboxed process; at runc's limit the runtime's own
# clone failed (EAGAIN) and the whole sandbox died on the first judge call. The sandbox's processes are
# still bounded by the executor's RLIMIT_NPROC per call (for each of the two untrusted uids). gVisor keeps
# the host threads it made (a fork bomb of 74 processes left 633 of them for good): at 4 per process a
# second fill of the process table took the sandbox down; 8 per process of both uids holds it.
RUNSC_PIDS_PER_PROC, RUNSC_OWN_PIDS = 16, 512


def _gvisor(runtime: str | None) -> bool:
    return runtime is not None and runtime.startswith("runsc")


def _pids_limit(pids: int, runtime: str | None) -> int:
    return pids * RUNSC_PIDS_PER_PROC + RUNSC_OWN_PIDS if _gvisor(runtime) else pids


# Under gVisor the container's memory cgroup holds gVisor's kernel too (its own heap, page tables), and
# gVisor charges each process more than Linux does: a Python interpreter forked from another costs it
# ~9.5 MiB (measured: 10 more sleeping children, +95 MiB of MemTotal - MemAvailable, the host's cgroup
# alike), copy-on-write breaking in larger units than Linux's pages. The executor's memory guard
# (injected/memguard.py) holds the sandbox to its memory less RUNSC_PROC_MEMORY per live process, so what
# fits on runc fits on runsc; the container gets room for that, and for gVisor and the guard's lag beyond.
RUNSC_PROC_MEMORY, RUNSC_OWN_MEMORY = 8 << 20, 256 << 20


def _memory_limit(mem: int, pids: int, runtime: str | None) -> int:
    return mem + pids * RUNSC_PROC_MEMORY + RUNSC_OWN_MEMORY if _gvisor(runtime) else mem


def executor_args(pids: int, mem: int, runtime: str | None) -> list[str]:
    """The executor's options for a runtime. Under gVisor the container's cgroups bound gVisor, not the
    sandbox's processes, and at their limits the host took the whole sandbox down (every batch-mate with
    it): the executor bounds each call's processes with RLIMIT_NPROC and the sandbox's memory with its guard.
    Its filter refuses mq_open (gVisor mounts no /dev/mqueue, so no wipe sees a queue) and answers clone3
    with ENOSYS (Docker's profile under gVisor says EPERM, and then no thread starts)."""
    if not _gvisor(runtime):
        return []
    return ["--nproc", str(pids), "--gvisor-filter", "--memory-budget", str(mem),
            "--process-memory", str(RUNSC_PROC_MEMORY)]


# The executor starts with an empty environment: under gVisor every uid may read any process's
# /proc/PID/environ (mode 0444, whatever its dumpability), and every process of the sandbox is a fork of the
# executor's and shows its initial environment (zeroed by common.scrub_environ, but as long as it was); now
# it shows nothing. The uid base reaches the executor in its program text instead.
EMPTY_ENV = ("/usr/bin/env", "-i", "/usr/bin/python3", "-I")


def executor_program(uid_base: int) -> str:
    """The executor's `-c` program for a sandbox whose uids start at `uid_base` (sandbox.uids)."""
    return f"import os\nos.environ['TG_UID_BASE'] = {str(uid_base)!r}\n" + executor_source()


class DockerWorker(Worker):
    """One container with a live executor; `call` sends one request over its stream."""

    def __init__(self, client, image: str, limits: Limits, cpus: float = 1.0,
                 work_mb: int = 128, tmp_mb: int = 64, runtime: str | None = None):
        self.client = client
        self.container = None
        self._sock = None
        self._lock = threading.Lock()
        mem = (limits.memory_mb + work_mb + tmp_mb + 64) << 20
        host_config = client.api.create_host_config(
            network_mode="none",
            cap_drop=["ALL"],
            cap_add=list(EXECUTOR_CAPS),
            security_opt=["no-new-privileges"],
            log_config={"Type": "none", "Config": {}},
            read_only=True,
            tmpfs={"/work": f"rw,exec,size={work_mb}m,mode=755,nosuid,nodev",
                   "/tmp": f"rw,size={tmp_mb}m,mode=1777,nosuid,nodev"},
            mem_limit=_memory_limit(mem, limits.pids + OWN_PIDS, runtime),
            memswap_limit=_memory_limit(mem, limits.pids + OWN_PIDS, runtime),
            pids_limit=_pids_limit(limits.pids + OWN_PIDS, runtime),
            nano_cpus=int(cpus * 1e9),
            ipc_mode="none",
            auto_remove=True,
            runtime=runtime,  # "runsc": gVisor, a kernel of the sandbox's own; None: the engine's default
        )
        base = new_base()
        created = client.api.create_container(
            image,
            command=[*EMPTY_ENV, "-c", executor_program(base), "--workroot", "/work", "--wipe-tmp",
                     *executor_args(limits.pids + OWN_PIDS, mem, runtime)],
            name=f"toolgym-sbx-{os.getpid()}-{uuid.uuid4().hex[:8]}",
            user="0:0",  # the executor's; untrusted code runs as uids of this sandbox's own (sandbox.uids)
            working_dir="/work",
            labels=owner_labels(),
            # what the engine shows; the executor itself starts with no environment at all (EMPTY_ENV)
            environment={"TG_UID_BASE": str(base)},
            stdin_open=True,
            detach=False,  # with stdin_open: StdinOnce, the executor sees EOF when we go away
            tty=False,
            network_disabled=True,
            host_config=host_config,
        )
        self.container = client.containers.get(created["Id"])
        try:
            raw = client.api.attach_socket(self.container.id, params={
                "stdin": 1, "stdout": 1, "stderr": 0, "stream": 1})
            self._sock = getattr(raw, "_sock", raw)
            self._sock.setblocking(True)
            self.container.start()
            self.channel = Channel(self._sock.fileno(), self._sock.fileno(), docker_mux=True, sock=self._sock)
            pong = self.channel.call({"op": "ping"}, timeout=60)
            if not pong.get("ok"):
                raise SandboxUnavailable(f"sandbox executor did not start: {pong.get('error') or pong}")
        except Exception:
            self.close()
            raise

    def call(self, req: dict[str, Any], timeout: float) -> dict[str, Any]:
        with self._lock:
            if self._sock is None:
                raise ChannelClosed("container closed")
            return self.channel.call(req, timeout)

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass
        c, self.container = self.container, None
        if c is not None:
            try:
                c.remove(force=True)
            except Exception:  # noqa: BLE001 - auto_remove may have won
                pass


class DockerBackend(Backend):
    """Factory of DockerWorkers; reaps orphans of crashed runs once per process."""

    name = "docker"

    def __init__(self, limits: Limits, image: str | None = None, cpus: float = 1.0, runtime: str | None = None,
                 pin_image: bool | None = None):
        from toolgym.sandbox.image import image_exists, image_name
        from toolgym.sandbox.image_pin import acquire, pin_choice

        global _REAPED
        self.client = connect()
        self.image = image or image_name()
        if not image_exists(self.client, self.image):
            raise SandboxUnavailable(
                f"sandbox image {self.image} not found; run `toolgym sandbox build-image` (or use backend='local')")
        with _REAP_LOCK:
            if not _REAPED:
                reap_orphans(self.client)
                _REAPED = True
        self.limits, self.cpus = limits, cpus
        self.runtime = _check_runtime(self.client, runtime)
        # y04: the image's pages held in the host's memory before any program runs (on by default under gVisor)
        self.pin = acquire(self.client, self.image) if pin_choice(pin_image, _gvisor(self.runtime)) else None

    def new_worker(self) -> DockerWorker:
        t0 = time.monotonic()
        w = DockerWorker(self.client, self.image, self.limits, self.cpus, runtime=self.runtime)
        w.start_s = time.monotonic() - t0
        return w

    def close(self) -> None:
        if self.pin is not None:
            from toolgym.sandbox.image_pin import release

            pin, self.pin = self.pin, None
            release(pin)
        try:
            self.client.close()
        except Exception:  # noqa: BLE001
            pass
