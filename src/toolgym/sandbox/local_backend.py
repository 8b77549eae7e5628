"""Local backend: the executor inside a bubblewrap (or `unshare`) namespace sandbox.

For machines without a Docker engine. Each pool worker is one long-lived sandbox:
new network (none), PID, IPC and UTS namespaces with the executor as PID 1; the host
root bound read-only; private size-capped tmpfs for /tmp and the work dir; /home,
/root, /run (Docker socket), the current directory and similar host dirs hidden under
empty tmpfs; a cgroup with memory (swap included) and pids limits when the host allows
(root); per call RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, a new session and a
process-group kill at the timeout. When started as root the executor drops to uid/gid
65534 before it serves any request.

ISOLATION IS WEAKER THAN DOCKER'S: the sandbox shares the host kernel with no seccomp
filter, sees the host's world-readable files (/usr, /etc, ...) read-only, and without
root there is no cgroup (memory is then bounded by RLIMIT_AS only and process counts
are not bounded). Use the docker backend for untrusted code at scale.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from toolgym.errors import SandboxUnavailable
from toolgym.sandbox import cgroups
from toolgym.sandbox.protocol import Channel, ChannelClosed, executor_source
from toolgym.sandbox.types import Limits

NOBODY = "65534:65534"
_HIDE = ("/home", "/root", "/run", "/var/run", "/var/tmp", "/mnt", "/media", "/srv", "/var/lib/docker")
_REAPED = False


def sandbox_python() -> str:
    """The interpreter inside the sandbox: this one (same packages, e.g. sympy), or
    TOOLGYM_SANDBOX_PYTHON."""
    return os.environ.get("TOOLGYM_SANDBOX_PYTHON") or sys.executable


def _keep_dirs(python: str) -> list[str]:
    """Dirs the sandbox's interpreter needs even when they lie under a hidden dir."""
    if python != sys.executable:
        return [os.path.dirname(os.path.dirname(os.path.realpath(python)))]
    return sorted({os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix), sys.prefix})


def _hidden_dirs(python: str, rebind: bool = True) -> list[str]:
    keep = _keep_dirs(python)
    out = []
    for d in (*_HIDE, os.getcwd(), str(Path(__file__).resolve().parents[3])):
        if not os.path.isdir(d) or os.path.islink(d) or d == "/":
            continue
        if not rebind and any(k.startswith(d.rstrip("/") + "/") or k == d for k in keep):
            continue
        if any(d.startswith(p + "/") or d == p for p in ("/usr", "/etc", "/bin", "/lib", "/lib64", "/sbin", "/proc")):
            continue
        if d not in out:
            out.append(d)
    return out


def probe() -> dict[str, Any]:
    """Which namespace tool works here: {'tool': 'bwrap'|'unshare'|None, 'why': str}.

    TOOLGYM_LOCAL_TOOL=unshare skips bubblewrap (to test or use the fallback)."""
    return _probe(os.environ.get("TOOLGYM_LOCAL_TOOL", ""))


@functools.lru_cache(maxsize=4)
def _probe(prefer: str) -> dict[str, Any]:
    root = os.geteuid() == 0
    bwrap = shutil.which("bwrap") if prefer != "unshare" else None
    why = "bwrap not installed" if prefer != "unshare" else "TOOLGYM_LOCAL_TOOL=unshare"
    if bwrap:
        args = [bwrap, "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--die-with-parent"]
        if not root:
            args.append("--unshare-user")
        try:
            r = subprocess.run([*args, "true"], capture_output=True, timeout=20)
            if r.returncode == 0:
                return {"tool": "bwrap", "path": bwrap, "why": "bubblewrap works"}
            why = r.stderr.decode(errors="replace").strip()[:200]
        except (OSError, subprocess.TimeoutExpired) as exc:
            why = str(exc)
    unshare = shutil.which("unshare")
    if unshare and root:
        r = subprocess.run([unshare, "--net", "--pid", "--mount", "--fork", "true"], capture_output=True, timeout=20)
        if r.returncode == 0:
            return {"tool": "unshare", "path": unshare, "why": f"bubblewrap unusable ({why}); unshare works as root"}
        why += "; unshare failed: " + r.stderr.decode(errors="replace").strip()[:200]
    return {"tool": None, "path": None,
            "why": f"no namespace tool: {why} (install bubblewrap: apt-get install bubblewrap)"}


def _rebinds(hidden: list[str], keep: list[str]) -> list[tuple[str, str]]:
    """(hidden dir, keep dir) for every keep dir that a hidden dir would cover."""
    out = []
    for k in keep:
        for d in hidden:
            if k.startswith(d.rstrip("/") + "/"):
                out.append((d, k))
                break
    return out


def _workroot(keep: list[str]) -> str:
    # /work unless the interpreter lives there; /run is always hidden under a tmpfs
    return "/run/toolgym-work" if any(k == "/work" or k.startswith("/work/") for k in keep) else "/work"


def bwrap_command(path: str, root: bool, python: str, exec_args: list[str], tmp_mb: int, work_mb: int,
                  cgroup: cgroups.SandboxCgroup | None) -> list[str]:
    hidden, keep = _hidden_dirs(python), _keep_dirs(python)
    workroot = _workroot(keep)
    # No --die-with-parent: its PDEATHSIG is tied to the *thread* that spawned bwrap (a pool
    # starter thread that soon exits). Host death closes the executor's stdin instead; the
    # executor (PID 1) then kills everything and exits, which ends the namespace.
    cmd = [path, "--new-session", "--as-pid-1", "--unshare-net", "--unshare-pid",
           "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
           "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    if not root:
        cmd.append("--unshare-user")
    for d in hidden:
        cmd += ["--perms", "0755", "--tmpfs", d]
    cmd += ["--size", str(tmp_mb << 20), "--perms", "1777", "--tmpfs", "/tmp",
            "--size", str(work_mb << 20), "--perms", "1777", "--tmpfs", workroot, "--tmpfs", "/sys"]
    # re-expose the interpreter's own prefix, read-only (also when it lives under /tmp, e.g. a CI clone)
    for d, k in _rebinds(["/tmp", *hidden], keep):
        parts = Path(k).relative_to(d).parts[:-1]
        for i in range(len(parts)):  # traversable parents (bwrap would make them 0700)
            cmd += ["--perms", "0755", "--dir", str(Path(d, *parts[:i + 1]))]
        cmd += ["--ro-bind", k, k]
    args = list(exec_args)
    if cgroup is not None and cgroup.oom_file:
        cmd += ["--perms", "0755", "--dir", "/sys/fs", "--perms", "0755", "--dir", "/sys/fs/cgroup",
                "--ro-bind", str(Path(cgroup.oom_file).parent), "/sys/fs/cgroup/memory"]
        args += ["--oom-file", "/sys/fs/cgroup/memory/" + Path(cgroup.oom_file).name]
    return [*cmd, "--chdir", workroot, *args, "--workroot", workroot]


def unshare_command(path: str, python: str, exec_args: list[str], tmp_mb: int, work_mb: int,
                    cgroup: cgroups.SandboxCgroup | None) -> list[str]:
    """The fallback without bubblewrap (root only): unshare + mounts done by a shell prelude."""
    hidden, keep = _hidden_dirs(python), _keep_dirs(python)
    if os.path.isdir("/work") and not os.path.islink("/work") and "/work" not in hidden:
        hidden.append("/work")  # bwrap covers /work with its work root; here it must be hidden explicitly
    workroot = "/run/toolgym-work"
    moves = _rebinds(["/tmp", *hidden], keep)
    # The interpreter's dirs are stashed under a fresh /run before /tmp and the hidden dirs are covered,
    # and moved back afterwards, so an interpreter under /tmp or a hidden dir keeps working.
    stash = " ".join(f"mkdir -p /run/.k{i} && mount --bind '{k}' /run/.k{i} &&" for i, (_, k) in enumerate(moves))
    hide = " ".join(f"mount -t tmpfs -o size=1m,mode=755 tmpfs '{d}' &&" for d in hidden
                    if d not in ("/run", "/var/run") and not d.startswith("/tmp/"))  # /tmp is fresh
    back = " ".join(f"mkdir -p '{k}' && mount --move /run/.k{i} '{k}' && mount -o remount,bind,ro '{k}' && "
                    f"rmdir /run/.k{i} &&" for i, (_, k) in enumerate(moves))
    prelude = (f"mount --make-rprivate / && mount -t tmpfs -o size=1m,mode=755 tmpfs /run && "
               f"mkdir -p /run/.newtmp && mount -t tmpfs -o size={tmp_mb}m,mode=1777 tmpfs /run/.newtmp && "
               f"{stash} mount --move /run/.newtmp /tmp && rmdir /run/.newtmp && "
               f"{hide} mkdir -p {workroot} && "
               f"mount -t tmpfs -o size={work_mb}m,mode=1777 tmpfs {workroot} && {back} "
               f"mount -o remount,bind,ro / && cd {workroot} && exec \"$@\"")
    cmd = [path, "--net", "--pid", "--ipc", "--uts", "--mount", "--fork", "--kill-child", "--mount-proc",
           "/bin/sh", "-c", prelude, "sh", *exec_args, "--workroot", workroot]
    if cgroup is not None and cgroup.oom_file:
        cmd += ["--oom-file", cgroup.oom_file]
    return cmd


class LocalWorker:
    """One namespace sandbox with a live executor, talking over its stdin/stdout pipes."""

    def __init__(self, limits: Limits, tool: dict[str, Any], work_mb: int = 128, tmp_mb: int = 64,
                 cpus: float = 1.0):
        self._lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        root = os.geteuid() == 0
        mem = (limits.memory_mb + work_mb + tmp_mb + 64) << 20
        self.cgroup = cgroups.SandboxCgroup(mem, limits.pids + 8, cpus) if root else None
        python = sandbox_python()
        exec_args = [python, "-I", "-c", executor_source(), "--wipe-tmp"]
        if root:
            exec_args += ["--drop", NOBODY]
        if tool["tool"] == "bwrap":
            cmd = bwrap_command(tool["path"], root, python, exec_args, tmp_mb, work_mb, self.cgroup)
        elif tool["tool"] == "unshare" and root:
            cmd = unshare_command(tool["path"], python, exec_args, tmp_mb, work_mb, self.cgroup)
        else:
            raise SandboxUnavailable(tool["why"])
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
        if self.cgroup is not None and self.cgroup.procs_files:
            # join the cgroups before exec, so every process of the sandbox is inside
            env["TG_CG"] = " ".join(self.cgroup.procs_files)
            cmd = ["/bin/sh", "-c", 'for f in $TG_CG; do echo $$ > "$f" || exit 97; done; exec "$@"', "sh", *cmd]
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=env, start_new_session=True, bufsize=0)
            self.channel = Channel(self.proc.stdout.fileno(), self.proc.stdin.fileno())
            pong = self.channel.call({"op": "ping"}, timeout=60)
            if not pong.get("ok"):
                raise SandboxUnavailable(f"local sandbox executor did not start: {pong}")
        except (ChannelClosed, OSError) as exc:
            err = b""
            if self.proc is not None:
                try:
                    self.proc.kill()
                    err = self.proc.communicate(timeout=5)[1] or b""
                except Exception:  # noqa: BLE001
                    pass
            self.close()
            raise SandboxUnavailable(
                f"local sandbox failed to start ({exc}): {err.decode(errors='replace').strip()[-300:]}") from exc
        except Exception:
            self.close()
            raise
        self.proc.stderr.close()

    def call(self, req: dict[str, Any], timeout: float) -> dict[str, Any]:
        with self._lock:
            if self.proc is None:
                raise ChannelClosed("sandbox closed")
            return self.channel.call(req, timeout)

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            try:
                proc.stdin.close()  # EOF: the executor kills its processes and exits
            except OSError:
                pass
            try:
                proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            for f in (proc.stdout, proc.stderr):
                try:
                    if f is not None:
                        f.close()
                except OSError:
                    pass
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None


class LocalBackend:
    """Factory of LocalWorkers; reaps cgroups of crashed runs once per process."""

    name = "local"

    def __init__(self, limits: Limits):
        global _REAPED
        self.tool = probe()
        if self.tool["tool"] is None:
            raise SandboxUnavailable(self.tool["why"])
        if not _REAPED and os.geteuid() == 0:
            cgroups.reap_orphans()
            _REAPED = True
        self.limits = limits

    def new_worker(self) -> LocalWorker:
        t0 = time.monotonic()
        w = LocalWorker(self.limits, self.tool)
        w.start_s = time.monotonic() - t0
        return w

    def close(self) -> None:
        pass
