"""How an agent program runs: in a jail of its own (untrusted, the default) or as a limited child process
(trusted).

Why a jail and not the sandbox's executor: the sandbox answers one call with one result, while an agent
program talks to the policy many times while it runs. The jail is built from the local sandbox's own parts
(:mod:`toolgym.sandbox.local_backend`: the same allowlisted read-only mounts, new network/PID/IPC/UTS/cgroup
namespaces, its seccomp filter, a cgroup with memory, pids and CPU limits) and the program runs in it as
uid 65534 with no capabilities. Its network namespace holds only ``lo``: nothing outside is reachable. The
one way out is the recording proxy's Unix socket, bound into the jail (read-only mount, so the program can
connect to it but not replace it); :mod:`toolgym.agents.program_relay`, the jail's PID 1, listens on the
jail's own loopback and copies each connection to that socket, so the program's ``OPENAI_BASE_URL`` is a
plain ``http://127.0.0.1:PORT/v1`` as everywhere else.

A trusted program runs as a child process of this one with resource limits (address space, CPU time, file
size) in a process group of its own, and (as root) a cgroup of its own, killed when the episode ends. It has
this machine's network, files and user: mark a program trusted only when you wrote it.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolgym.errors import ConfigError

#: where the proxy's socket and the program file appear inside the jail
SOCKET_DIR = "/run/toolgym-proxy"
PROGRAM_DIR = "/program"
NOBODY = 65534
#: what a jailed program may start (the relay, the program, its threads and children)
JAIL_PIDS = 256
TMP_MB = 64

_RLIMITS = """import os, resource, sys
mem, cpu = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))
os.execvp(sys.argv[3], sys.argv[3:])
"""


@dataclass(frozen=True)
class ProgramLimits:
    """What one run of the program may use: memory (MiB), CPU time and wall time (s)."""

    memory_mb: int = 2048
    timeout_s: float = 120.0
    cpus: float = 1.0


def jail_unavailable() -> str | None:
    """None when untrusted programs can be jailed here, else one actionable line."""
    from toolgym.sandbox.local_backend import probe

    why = probe()
    if why.get("tool") == "bwrap":
        return None
    return (f"an untrusted agent program runs in a bubblewrap jail, which cannot start here ({why.get('why')}); "
            "set trusted: true in env_kwargs only for a program you wrote")


class Launch:
    """One run's command, environment and clean-up. ``url``: what the proxy listens on (a ``unix:`` path for
    a jail, else the loopback URL)."""

    def __init__(self, argv: list[str], env: dict[str, str], *, pass_fds: tuple[int, ...] = (),
                 cgroup: Any = None, tmp: Any = None, socket_path: str | None = None) -> None:
        self.argv, self.env, self.pass_fds = argv, env, pass_fds
        self.cgroup, self.tmp, self.socket_path = cgroup, tmp, socket_path

    def kill(self) -> None:
        """Everything the program started, whatever it did to escape its process group."""
        if self.cgroup is not None:
            self.cgroup.kill()

    def close(self) -> None:
        for fd in self.pass_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.pass_fds = ()
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
        if self.tmp is not None:
            self.tmp.cleanup()
            self.tmp = None


_JOIN = 'for f in $TG_CG; do echo $$ > "$f" || exit 97; done; unset TG_CG; exec "$@"'


def trusted(argv: list[str], env: dict[str, str], limits: ProgramLimits) -> Launch:
    """A trusted program under rlimits (set by a tiny launcher that then execs it), in a cgroup of its own where
    this process may make one (root), so nothing it starts outlives the episode, even in a session of its own."""
    cpu = max(1, int(limits.timeout_s) + 1)
    cmd = [sys.executable, "-I", "-c", _RLIMITS, str(limits.memory_mb << 20), str(cpu), *argv]
    cg = None
    if os.geteuid() == 0:
        from toolgym.sandbox import cgroups

        cg = cgroups.SandboxCgroup((limits.memory_mb + 64) << 20, JAIL_PIDS, limits.cpus)
        if not cg.procs_files:
            cg.remove()
            cg = None
    if cg is None:
        return Launch(cmd, env)
    return Launch(["/bin/sh", "-c", _JOIN, "sh", *cmd], {**env, "TG_CG": " ".join(cg.procs_files)}, cgroup=cg)


def jailed(argv: list[str], env: dict[str, str], limits: ProgramLimits, program: str) -> Launch:
    """An untrusted program in a jail: ``argv[0]`` is the interpreter (this one's), ``program`` the host file
    bound read-only at ``/program/NAME``; the proxy is to listen on ``launch.socket_path``."""
    from toolgym.sandbox import cgroups, seccomp
    from toolgym.sandbox.local_backend import _keep_dirs, _workroot, bwrap_prefix, probe
    from toolgym.sandbox.types import OWN_PIDS

    why = jail_unavailable()
    if why:
        raise ConfigError(why)
    tool = probe()
    tmp = tempfile.TemporaryDirectory(prefix="toolgym-proxy-")
    os.chmod(tmp.name, 0o711)  # uid 65534 inside reaches the socket; nobody lists the dir
    cg = cgroups.SandboxCgroup((limits.memory_mb + TMP_MB + 64) << 20, JAIL_PIDS + OWN_PIDS, limits.cpus)
    launch = Launch([], {}, cgroup=cg, tmp=tmp, socket_path=str(Path(tmp.name) / "proxy.sock"))
    try:
        missing = cg.missing()
        if missing:
            raise ConfigError(missing)
        keep = _keep_dirs(sys.executable)
        fd = seccomp.program_fd()
        launch.pass_fds = (fd,)
        binds = [(tmp.name, SOCKET_DIR), (str(Path(program).resolve()), f"{PROGRAM_DIR}/{Path(program).name}")]
        prefix = bwrap_prefix(tool["path"], tool["setpriv"], keep, _workroot(keep), TMP_MB, 1, fd, binds=binds)
        drop = [tool["setpriv"], f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--bounding-set=-all",
                "--inh-caps=-all", "--ambient-caps=-all", "--no-new-privs", "--"]
        from toolgym.agents import program_relay

        relay = [sys.executable, "-I", "-c", Path(program_relay.__file__).read_text(), f"{SOCKET_DIR}/proxy.sock",
                 "--"]
        launch.argv = ["/bin/sh", "-c", _JOIN, "sh", *prefix, *drop, *relay, *argv]
        launch.env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp", "TMPDIR": "/tmp",
                      "TG_CG": " ".join(cg.procs_files), **env}
        return launch
    except BaseException:
        launch.close()
        raise
