"""The in-sandbox executor: a tiny server that lives inside one sandbox.

Standard library only. The host injects this file's text as `python3 -I -c SOURCE`, so
the image carries no toolgym code. It is PID 1 of its PID namespace (a container, or a
bubblewrap sandbox with --as-pid-1) and starts as the sandbox's root, holding only the
capabilities it needs to hand out uids (SETUID, SETGID, KILL, CHOWN, DAC_OVERRIDE,
FOWNER). Untrusted code never runs as root: every call of it runs as RUN_UID (65534 by default;
each sandbox gets uids of its own from the host, see common.py), and the judge's trusted test
evaluator as EVAL_UID (65533 by default).

Every hardening step fails closed: without no-new-privileges, a seccomp filter, a
non-dumpable executor and exactly the expected capabilities, it answers every request
with an error and runs nothing.

Protocol: frames (frames.py: a 4-byte big-endian length and a UTF-8 JSON object) on fd 0
(requests) and fd 1 (responses). One request at a time. A session's interpreter gets its cells
on a socket of the same framing, written and read within each cell's deadline.

The work root is root's own (mode 0755: a call can see that it is alone there, but write only in
its own dir below it, and in /tmp and the like, wiped after every call).

Every call starts clean:
- Processes of a call are forked from a TEMPLATE process (a fork server, forkserver.py) that
  the executor forked at start-up, before it read any request. The template only ever receives
  file descriptors; what a call runs (code path, argv, limits) reaches the call's own child
  through a pipe after the fork. So no call's memory holds anything of an earlier call.
  Python calls run in that forked interpreter (much cheaper than a new one); C++ and
  bash calls exec.
- After a call, the standing cleaner of the call's uid sends SIGKILL to every process of
  that uid at once (`kill(-1)`: no fork chain outruns it) and removes the SysV IPC objects
  the uid owns or created; the executor wipes /tmp, /var/tmp, /dev/shm, /dev/mqueue and the work dir
  through directory descriptors (no path length limit, no symlink is followed). The
  cleaners (one per untrusted uid, see common.Cleaner) are forked at start-up, before any
  request: cleaning up never forks, so a program that fills the process table cannot stop
  it, and no program can signal or trace a cleaner (its real and saved uids are its own).
  Trusted calls (the judge harness) get the cleaners' sockets as fds 3 and 4. The executor then proves the sandbox clean (no process but its own, empty
  dirs, no IPC object, no OOM kill, free disk); the reply says "healthy": false
  otherwise, and the host replaces the sandbox.
"""

import base64
import json
import os
import resource
import select
import signal
import socket
import sys
import time

import frames
import limits
import memguard
from common import (
    OOM_FILES,
    PR_GET_DUMPABLE,
    PR_GET_NO_NEW_PRIVS,
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    PR_SET_NO_NEW_PRIVS,
    RUN_UID,
    UID_BASE,
    UNTRUSTED_UIDS,
    WIPE_DIRS,
    Cleaner,
    drop_to,
    exit_code,
    flush,
    gvisor_filter,
    ipc_objects,
    listing,
    live,
    oom_count,
    other_pids,
    pidfd_open,
    prctl,
    print_exc,
    proc_identity,
    protector,
    reap,
    run_as_main,
    scrub_environ,
    sink,
    tasks,
    uid_of,
    wipe,
)
from forkserver import ForkServer, description, place

WORKROOT = "/work"
WIPE_TMP = False
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_KILL, CAP_SETGID, CAP_SETUID
CAPS = (1 << 0) | (1 << 1) | (1 << 3) | (1 << 5) | (1 << 6) | (1 << 7)
_IN = _OUT = -1
_SESSION = None  # dict(pid, ctl, out, err, uid) of the live session interpreter
_SEQ = [0]
_TEMPLATE = None  # the call template: a forkserver.ForkServer
_CLEANERS = {}  # untrusted uid -> its standing Cleaner
_BASE_TASKS = [None]  # tasks in the sandbox's pids cgroup when no call runs
_REFUSED = None  # why this sandbox refuses to run anything (a hardening step failed)
_ORPHANS = [False]  # whether orphans of a call come to us during it (no subreaper below us): reaped as it runs
_NPROC = [None]  # RLIMIT_NPROC of every call, where the host asks for one (--nproc: gVisor)
_GUARD = [None]  # the memory guard, where the sandbox's kernel is gVisor's (memguard.py)


# ----------------------------------------------------------------------------- framing
def read_frame(fd):
    """The next request on `fd` (a JSON object, see frames.py); None at the end of the stream; a dict
    with "__error__" for a frame that is too large (dropped: the stream stays in step) or malformed."""
    try:
        body = frames.read(fd, drain=True)
    except frames.FrameTooLarge:
        return {"__error__": "frame too large"}
    if body is None:
        return None
    try:
        obj = json.loads(body.decode("utf-8"))
    except ValueError as exc:
        return {"__error__": f"malformed request: {exc}"}
    if not isinstance(obj, dict):
        return {"__error__": "malformed request: not a JSON object"}
    return obj


def write_frame(fd, obj):
    frames.write(fd, frames.encode(obj))


# ----------------------------------------------------------------------------- hardening
def _status_fields():
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, val = line.partition(":")
            out[key] = val.strip()
    return out


def _harden():
    """Every step that keeps sandboxed code in its place; None when all hold, else why not."""
    try:
        if os.getuid() != 0:
            return ("the executor must start as the sandbox's root (it runs code as uid "
                    f"{RUN_UID}); it runs as uid {os.getuid()}")
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        prctl(PR_SET_DUMPABLE, 0)  # /proc/1/{mem,fd,environ} stay closed to everything else
        if prctl(PR_GET_DUMPABLE, 0) != 0:
            return "the executor is still dumpable after PR_SET_DUMPABLE 0"
        try:
            prctl(PR_SET_CHILD_SUBREAPER, 1)  # calls' processes are ours even when not PID 1
        except OSError:
            if os.getpid() != 1:
                raise
            _ORPHANS[0] = True  # gVisor: no subreapers, so a judge harness's orphans come to us
        if prctl(PR_GET_NO_NEW_PRIVS, 0) != 1:  # asked of the kernel: gVisor's /proc has no NoNewPrivs line
            return "no_new_privs is not set"
        st = _status_fields()
        if st.get("Seccomp") != "2":
            return (f"no seccomp filter is active (Seccomp: {st.get('Seccomp')}); "
                    "run the sandbox with its seccomp profile")
        eff = int(st.get("CapEff", "0"), 16)
        if eff != CAPS:
            return (f"unexpected capabilities {eff:#x} (need exactly {CAPS:#x}: "
                    "SETUID, SETGID, KILL, CHOWN, DAC_OVERRIDE, FOWNER)")
    except (OSError, ValueError) as exc:
        return f"hardening failed: {exc}"
    return None


def _bound(nproc, gvisor_rules):
    """Where the sandbox's kernel is gVisor's (the host says so: --nproc, --gvisor-filter): every call's uid
    may have at most `nproc` processes (the container's pids cgroup holds gVisor itself too, and a program
    that filled it took the whole sandbox down), mq_open is refused and clone3 is ENOSYS (gvisor_filter).
    None, else why not."""
    try:
        if nproc is not None:
            _NPROC[0] = int(nproc)  # every call's processes (_set_rlimits), not the executor's own threads
        if gvisor_rules:
            gvisor_filter()
            _ORPHANS[0] = True  # gVisor lets only PID 1 be a subreaper: a judge harness's orphans come to us
    except (OSError, ValueError, KeyError) as exc:
        return f"the process bound or the gVisor filter did not hold: {exc!r}"
    return None


def _own_workroot():
    """The work root belongs to root and no untrusted uid may write there (mode 0755): a call writes only
    in its own dir below it, which goes with the call, so nothing a job leaves at the top reaches the next
    one. None when that holds, else why not (the sandbox then refuses to serve)."""
    try:
        os.makedirs(WORKROOT, exist_ok=True)
        os.chown(WORKROOT, 0, 0)
        os.chmod(WORKROOT, 0o755)
        st = os.stat(WORKROOT)
    except OSError as exc:
        return f"the work root {WORKROOT} cannot be made root's own: {exc}"
    if st.st_uid != 0 or st.st_mode & 0o7777 != 0o755:
        return f"the work root {WORKROOT} stays writable by others (mode {st.st_mode & 0o7777:o})"
    return None


# ----------------------------------------------------------------------------- helpers
def _keep():
    keep = {_TEMPLATE.pid} if _TEMPLATE else set()
    keep |= {c.pid for c in _CLEANERS.values()}
    if _SESSION:
        keep.add(_SESSION["pid"])
    return keep


def _kill_all(keep=(), patience=10.0):
    """Kill every process of the sandbox but us, the template (and `keep`). True if none is left.

    Untrusted uids are killed by their own cleaner (an atomic kill(-1)); this catches what
    is left, e.g. a trusted judge harness's helpers. Dying processes need CPU time to exit
    and share the sandbox's CPU quota: wait for them (with back-off) up to `patience` s."""
    keep = set(keep) | _keep()
    deadline = time.monotonic() + patience
    pause = 0.0005
    while True:
        reap()
        pids = [p for p in other_pids(keep) if live(p)]
        if not pids:
            return True
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        reap()
        if time.monotonic() > deadline:
            return not [p for p in other_pids(keep) if live(p)]
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _safe_path(root, name):
    if not isinstance(name, str) or not name or "\x00" in name:
        raise ValueError(f"bad file name {name!r}")
    if name.startswith("/") or any(part in ("..",) for part in name.split("/")):
        raise ValueError(f"file name {name!r} escapes the work dir")
    path = os.path.normpath(os.path.join(root, name))
    if not path.startswith(root + "/"):
        raise ValueError(f"file name {name!r} escapes the work dir")
    return path


_PROTECTED = []  # common.protector(WORKROOT), made once at start-up (it resolves 3 paths: ~20 us a use)


def _protected(path):
    if not _PROTECTED:
        _PROTECTED.append(protector(WORKROOT))
    return _PROTECTED[0](path)


def _wipe(path, spare=()):
    return wipe(path, spare, _protected)


def _listing(path, spare=()):
    return listing(path, spare, _protected)


def _decode(b):
    return b.decode("utf-8", "replace")


def _limits(req):
    lim = req.get("limits") or {}
    timeout = float(lim.get("timeout_s", limits.TIMEOUT_S))
    cpu = lim.get("cpu_s")
    return {
        "timeout_s": timeout,
        "cpu_s": float(cpu) if cpu is not None else timeout,
        "memory_mb": int(lim.get("memory_mb", limits.MEMORY_MB)),
        "output_bytes": int(lim.get("output_bytes", limits.OUTPUT_BYTES)),
        "file_bytes": int(lim.get("file_bytes", limits.FILE_BYTES)),
        "nproc": int(lim["nproc"]) if lim.get("nproc") else _NPROC[0],
    }


def _set_rlimits(lim, address_space=True):
    cpu = max(1, int(lim["cpu_s"] + 0.999))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    if address_space:
        mem = lim["memory_mb"] << 20
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_FSIZE, (lim["file_bytes"], lim["file_bytes"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if lim.get("nproc"):
        n = int(lim["nproc"])
        resource.setrlimit(resource.RLIMIT_NPROC, (n, n))


_RESET_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP,
                  signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)


def _python_signals():
    """What `python3` sets up at start: SIGPIPE/SIGXFSZ ignored, SIGINT -> KeyboardInterrupt."""
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _env(cwd):
    return {"PATH": PATH, "HOME": cwd, "LANG": "C.UTF-8", "TMPDIR": "/tmp",
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"}


def _python_stdio():
    import io

    sys.stdin = sys.__stdin__ = io.TextIOWrapper(open(0, "rb", closefd=False), encoding="utf-8")
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(open(1, "wb", closefd=False), encoding="utf-8",
                                                   errors="strict")
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(open(2, "wb", closefd=False), encoding="utf-8",
                                                   errors="backslashreplace", line_buffering=True)


def _python_main(path, argv, cwd, extra_env=None):
    """Run user code as `python3 -I main.py ARGV` would, in this forked interpreter."""
    os.environ.clear()
    os.environ.update(_env(cwd))
    os.environ.update(extra_env or {})
    _python_signals()
    _python_stdio()
    sys.argv = ["main.py", *argv]
    sys.path.insert(0, cwd)
    run_as_main(path, "main.py")


# ----------------------------------------------------------------------------- the template
def _call_child(fds):
    """A call, in a fresh fork of the template (forkserver.py): read what to run from fds[0], set up, run."""
    try:
        desc = description(fds[0])
        os.setsid()
        place(fds[1:])  # stdin, stdout, stderr at 0, 1, 2; a session's control socket or the cleaners' from 3
        kind, uid, cwd, lim = desc["kind"], int(desc["uid"]), desc["cwd"], desc["lim"]
        if uid != 0:  # the OOM killer takes untrusted code first, never a trusted judge harness
            with open("/proc/self/oom_score_adj", "w") as fh:
                fh.write("1000")
        try:
            # Lowest CPU weight inside the sandbox's own cgroup: a fork bomb then cannot starve
            # the executor that has to kill it.
            os.setpriority(os.PRIO_PROCESS, 0, 19)
        except OSError:
            pass
        os.chdir(cwd)
        for sig in _RESET_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        _set_rlimits(lim, address_space=True)
        if uid != 0:
            drop_to(uid)
        if kind == "python":
            _python_main(desc["path"], desc["argv"], cwd, desc.get("env"))
        elif kind == "session":
            _session_loop(3)
        else:
            os.execve(desc["argv"][0], desc["argv"], _env(cwd))
    except BaseException as exc:  # noqa: B036
        try:
            os.write(2, f"sandbox: cannot start program: {type(exc).__name__}: {exc}\n".encode())
        finally:
            os._exit(127)
    os._exit(127)


def _fork_call(desc, fds):
    """Have the template fork a call; `desc` reaches only that call. Returns its pid."""
    pid = _TEMPLATE.fork(desc, fds)
    if pid <= 0:
        raise RuntimeError("the call template could not fork")
    return pid


# ----------------------------------------------------------------------------- supervision
CTL_MAX = 4096  # the largest answer a session interpreter sends on its control channel ({"rc": N})


def _ctl_answer(buf):
    """The session interpreter's answer, once `buf` holds a whole frame: {"rc": int}, or {"bad": True}
    for anything else (a cell may write on the channel itself); None while incomplete."""
    try:
        body = frames.take(buf, CTL_MAX)
    except frames.FrameTooLarge:
        return {"bad": True}
    if body is None:
        return None
    try:
        obj = json.loads(body.decode("utf-8"))
    except ValueError:
        return {"bad": True}
    rc = obj.get("rc") if isinstance(obj, dict) else None
    if not isinstance(rc, int) or isinstance(rc, bool):
        return {"bad": True}
    return {"rc": rc}


REAP_TICK_S = 0.05  # how often orphans are reaped during a call, where they come to us (gVisor)
CPU_TICK_S = 0.25  # how often a session's cell has its CPU time read against its limit


def _supervise(pid, fds, deadline, cap, ctl=None, send=b"", over_cpu=None):
    """Read `fds` (stdout, stderr) under a byte cap until `pid` exits (or `ctl` answers).

    `ctl` (a session's control socket, non-blocking) is written (`send`: the cell) and read in this
    same loop, within the deadline: an interpreter that stops reading, or writes part of a frame, can
    only run into the deadline. Without `ctl`, the template's report that `pid` ended stops the loop.
    `over_cpu` (a session's cell): read every CPU_TICK_S; True ends the call with reason "cpu_limit".
    Returns dict(out, err, status, truncated flags, wait status, ctl message)."""
    bufs = {fd: bytearray() for fd in fds}
    trunc = {fd: False for fd in fds}
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    server = None
    pending = memoryview(send)
    ctl_buf = bytearray()
    if ctl is None:  # the call is the template's child: the template reports its end
        server = _TEMPLATE.sock.fileno()
        poller.register(server, select.POLLIN)
    else:
        poller.register(ctl, select.POLLIN | select.POLLHUP | (select.POLLOUT if pending else 0))
    open_fds = set(fds)
    reason = None
    wstatus = None
    ctl_msg = None
    next_tick = time.monotonic() + CPU_TICK_S
    while True:
        now = time.monotonic()
        left = deadline - now
        if left <= 0:
            reason = "timeout"
            break
        if over_cpu is not None and now >= next_tick:
            if over_cpu():
                reason = "cpu_limit"
                break
            next_tick = now + CPU_TICK_S
        wait_ms = (min(left, next_tick - now) if over_cpu is not None else left) * 1000
        if _ORPHANS[0]:  # a zombie counts against its uid's RLIMIT_NPROC until it is reaped
            reap()
            wait_ms = min(wait_ms, REAP_TICK_S * 1000)
        events = poller.poll(max(1, int(wait_ms)))
        for fd, ev in events:
            if fd == server:
                _TEMPLATE.pump()
            elif fd == ctl:
                if pending and ev & select.POLLOUT:
                    try:
                        pending = pending[os.write(ctl, pending):]
                    except BlockingIOError:
                        pass
                    except OSError:
                        ctl_msg = {"dead": True}
                    if not pending:
                        poller.modify(ctl, select.POLLIN | select.POLLHUP)
                if ctl_msg is None and ev & (select.POLLIN | select.POLLHUP | select.POLLERR):
                    try:
                        chunk = os.read(ctl, 65536)
                    except BlockingIOError:
                        chunk = None
                    except OSError:
                        chunk = b""
                    if chunk == b"":
                        ctl_msg = {"dead": True}
                    elif chunk:
                        ctl_buf += chunk
                        ctl_msg = _ctl_answer(ctl_buf)
                if ctl_msg is not None:
                    poller.unregister(ctl)
            elif fd in open_fds:
                data = os.read(fd, 65536)
                if not data:
                    poller.unregister(fd)
                    open_fds.discard(fd)
                    continue
                room = cap - len(bufs[fd])
                if len(data) > room:
                    bufs[fd] += data[:max(room, 0)]
                    trunc[fd] = True
                    reason = "output_limit"
                else:
                    bufs[fd] += data
        if reason:
            break
        if ctl is None:
            if pid in _TEMPLATE.exits:
                wstatus = _TEMPLATE.wait(pid)
                break  # the program ended; daemons still holding its pipes die next
        elif ctl_msg is not None:
            break
    # drain what is already in the pipes, without waiting for daemons holding them
    for fd in list(open_fds):
        os.set_blocking(fd, False)
        try:
            while len(bufs[fd]) <= cap:
                data = os.read(fd, 65536)
                if not data:
                    break
                room = cap - len(bufs[fd])
                if len(data) > room:
                    bufs[fd] += data[:max(room, 0)]
                    trunc[fd] = True
                    reason = reason or "output_limit"
                    break
                bufs[fd] += data
        except BlockingIOError:
            pass
    out_fd, err_fd = fds
    return {"out": bytes(bufs[out_fd]), "err": bytes(bufs[err_fd]), "reason": reason,
            "out_trunc": trunc[out_fd], "err_trunc": trunc[err_fd], "wstatus": wstatus, "ctl": ctl_msg}


def _classify(res, oom_before):
    wstatus = res["wstatus"]
    exit_code = None
    sig = None
    if wstatus is not None:
        if os.WIFEXITED(wstatus):
            exit_code = os.WEXITSTATUS(wstatus)
        elif os.WIFSIGNALED(wstatus):
            sig = os.WTERMSIG(wstatus)
            exit_code = -sig
    oom = oom_count() > oom_before
    err = res["err"][-4096:]
    if oom:  # the kernel's OOM killer struck during the call: that is why it failed
        status = "oom"
    elif res["reason"] in ("timeout", "cpu_limit"):
        status = "timeout"
    elif res["reason"] == "output_limit":
        status = "output_limit"
    elif (exit_code and (b"MemoryError" in err or b"std::bad_alloc" in err or
                                b"Cannot allocate memory" in err or b"out of memory" in err)):
        status = "oom"
    elif sig == signal.SIGXCPU:
        status = "timeout"
    elif sig in (signal.SIGKILL, signal.SIGTERM):
        status = "killed"
    elif exit_code == 0:
        status = "ok"
    else:
        status = "error"
    return status, exit_code, oom


def _spawn(desc, stdin_fd, extra=()):
    """Fork a call through the template: Python in the forked interpreter, else exec. `extra`: fds
    the call gets from 3 on."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    null = None
    if stdin_fd is None:
        stdin_fd = null = os.open(os.devnull, os.O_RDONLY)
    try:
        pid = _fork_call(desc, [stdin_fd, out_w, err_w, *extra])
    except BaseException:
        os.close(out_r)
        os.close(err_r)
        raise
    finally:
        os.close(out_w)
        os.close(err_w)
        if null is not None:
            os.close(null)
    return pid, out_r, err_r


def _run_one(desc, stdin_fd, lim, oom_before):
    t0 = time.monotonic()
    extra = ()
    if desc["uid"] == 0 and desc["kind"] == "python":  # the judge harness: it cleans up through our cleaners
        extra = [_CLEANERS[uid].sock.fileno() for uid in UNTRUSTED_UIDS]
        desc = dict(desc, env={"TG_CLEANERS": ",".join(str(_CLEANERS[uid].pid) for uid in UNTRUSTED_UIDS),
                               "TG_OOM_FILES": ":".join(OOM_FILES), "TG_UID_BASE": str(UID_BASE)})
    pid, out_r, err_r = _spawn(dict(desc, lim=lim), stdin_fd, extra)
    try:
        res = _supervise(pid, (out_r, err_r), t0 + lim["timeout_s"], lim["output_bytes"])
    finally:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        os.close(out_r)
        os.close(err_r)
    if res["wstatus"] is None:
        res["wstatus"] = _TEMPLATE.wait(pid)
    status, exit_code, oom = _classify(res, oom_before)
    return {"stdout": _decode(res["out"]), "stderr": _decode(res["err"]), "exit_code": exit_code,
            "status": status, "duration_s": time.monotonic() - t0,
            "stdout_truncated": res["out_trunc"], "stderr_truncated": res["err_trunc"]}, oom


def _clean_uids(uids, spare=None):
    """Kill what every untrusted uid a call may have used left behind. True if none is left.

    Skipped when the sandbox's pids cgroup counts no task beyond those at start-up (the
    executor, the cleaners, the template) and a live session: that count is exact and includes
    forks in progress, and no other process exists that could create one. Never forks: the
    cleaners stand (a program may have filled the process table)."""
    reap()
    quiet = _BASE_TASKS[0] is not None and tasks() == _BASE_TASKS[0] + (1 if _SESSION else 0)
    ok = True
    for uid in uids:
        cleaner = _CLEANERS.get(uid)
        if cleaner is None:
            ok = False
        elif quiet and (spare is not None or not ipc_objects(uid)):
            ok = cleaner.intact() and ok  # nothing of this uid runs, and it holds no IPC object to remove
        else:
            ok = cleaner.sweep(spare) and ok
    return ok


def _health(oom, uids=(RUN_UID,), before_wipe=None):
    """Clean up after a call and prove the sandbox clean; anything left makes it unhealthy."""
    spare = _SESSION["pid"] if _SESSION else None
    reasons = []
    if not _clean_uids(uids, spare):
        reasons.append("leftover processes")
    if not _kill_all():  # what a trusted harness left
        reasons.append("leftover processes")
    if before_wipe is not None:
        before_wipe()  # nothing runs any more: files hold still
    keep = ("session",) if _SESSION else ()
    # a live session keeps its files in /tmp between its cells; they go when it ends
    dirs = [WORKROOT, *(WIPE_DIRS if WIPE_TMP and spare is None else ())]
    if not all([_wipe(d, keep if d == WORKROOT else ()) for d in dirs]) or any(
            _listing(d, keep if d == WORKROOT else ()) for d in dirs):
        reasons.append("work dir not clean" if _listing(WORKROOT, keep) else "temporary dirs not clean")
    if spare is None and ipc_objects():
        reasons.append("IPC objects left")
    if oom:
        reasons.append("out of memory")
    for path in (WORKROOT, "/tmp"):
        try:
            st = os.statvfs(path)
            if st.f_bavail * st.f_frsize < (4 << 20):
                reasons.append(f"disk full at {path}")
        except OSError:
            pass
    return {"healthy": not reasons, "reason": ", ".join(dict.fromkeys(reasons))}


# ----------------------------------------------------------------------------- requests
def op_run(req):
    language = req.get("language", "python")
    if language not in ("python", "cpp", "bash"):
        return {"ok": False, "error": f"unknown language {language!r}; use one of python, cpp, bash"}
    code = req.get("code")
    if not isinstance(code, str):
        return {"ok": False, "error": "malformed request: 'code' must be a string"}
    try:
        lim = _limits(req)
        argv = [str(a) for a in (req.get("argv") or [])]
    except (TypeError, ValueError, AttributeError) as exc:
        return {"ok": False, "error": f"malformed request: {exc}"}
    # trusted: toolgym's own judge harness, which runs as the sandbox's root and hands its
    # test processes the untrusted uids itself. Only the host can ask for it.
    trusted = req.get("trusted") is True
    uid = 0 if trusted else RUN_UID
    if _SESSION is not None:
        _session_kill()
    _SEQ[0] += 1
    cwd = os.path.join(WORKROOT, f"call-{_SEQ[0]}")
    os.mkdir(cwd, 0o700)
    os.chown(cwd, uid, uid)
    oom_before = oom_count()
    base = {"uid": uid, "cwd": cwd}
    res = None
    uids = UNTRUSTED_UIDS if trusted else (RUN_UID,)
    try:
        for name, b64 in (req.get("files") or {}).items():
            p = _safe_path(cwd, name)
            _write_file(p, base64.b64decode(b64, validate=False), uid, cwd)
        stdin_path = os.path.join(cwd, ".stdin")
        # root's, 0600: under gVisor every uid may list /proc/1/fd and reopen what it names (Linux: only
        # root, the executor being non-dumpable), and a trusted call's stdin holds the judge's hidden tests
        with os.fdopen(os.open(stdin_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), "wb") as fh:
            fh.write(str(req.get("stdin") or "").encode("utf-8", "surrogateescape"))
        fd = os.open(stdin_path, os.O_RDONLY)  # kept open, unlinked: the program cannot see it
        os.unlink(stdin_path)
        try:
            ext = {"python": "main.py", "bash": "main.sh", "cpp": "main.cpp"}[language]
            src = os.path.join(cwd, ext)
            _write_file(src, code.encode("utf-8", "surrogateescape"), uid, cwd)
            if language == "cpp":
                comp_lim = dict(lim, timeout_s=max(lim["timeout_s"], float(req.get("compile_timeout_s", 30))),
                                memory_mb=max(lim["memory_mb"], limits.COMPILE_MEMORY_MB), cpu_s=max(lim["cpu_s"], 30.0),
                                output_bytes=min(lim["output_bytes"], 64 << 10),
                                file_bytes=max(lim["file_bytes"], 64 << 20))
                flags = [str(f) for f in (req.get("cflags") or ["-O2", "-std=c++17", "-pipe"])]
                res, oom = _run_one(dict(base, kind="exec", argv=["/usr/bin/g++", *flags, "-o", "main", "main.cpp"]),
                                    None, comp_lim, oom_before)
                if res["status"] != "ok":
                    if res["status"] == "error":
                        res["stderr"] = "compilation failed:\n" + res["stderr"]
                    return _finish(res, cwd, req, oom, uids)
                _clean_uids(uids)  # nothing of the compiler may run on beside the program
                res, oom = _run_one(dict(base, kind="exec", argv=[os.path.join(cwd, "main"), *argv]), fd, lim,
                                    oom_before)
            elif language == "bash":
                res, oom = _run_one(dict(base, kind="exec", argv=["/bin/bash", src, *argv]), fd, lim, oom_before)
            else:
                res, oom = _run_one(dict(base, kind="python", path=src, argv=argv), fd, lim, oom_before)
        finally:
            os.close(fd)
        return _finish(res, cwd, req, oom, uids)
    except (ValueError, TypeError, AttributeError) as exc:  # bad files: nothing ran yet
        if res is not None:
            raise
        _remove_dir(cwd)
        return {"ok": False, "error": f"malformed request: {exc}"}


def _write_file(path, data, uid, cwd):
    """Write a request's file as root, owned by the call's uid (its parents too)."""
    d = os.path.dirname(path)
    parts = os.path.relpath(d, cwd).split("/") if d != cwd else []
    cur = cwd
    for part in parts:
        cur = os.path.join(cur, part)
        if not os.path.isdir(cur):
            os.mkdir(cur, 0o700)
            os.chown(cur, uid, uid)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchown(fd, uid, uid)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def _read_back(cwd, name, cap, uid):
    """A file the program wrote: every path part opened without following links, a regular
    file owned by the call's uid, at most `cap` bytes. None otherwise."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    parts = name.split("/")
    fd = os.open(cwd, flags | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, flags | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        leaf = os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=fd)
    finally:
        os.close(fd)
    try:
        st = os.fstat(leaf)
        import stat

        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            return None
        chunks, got = [], 0
        while got < cap:
            b = os.read(leaf, min(cap - got, 1 << 20))
            if not b:
                break
            chunks.append(b)
            got += len(b)
        return b"".join(chunks)
    finally:
        os.close(leaf)


def _finish(res, cwd, req, oom, uids):
    files = {}
    cap = int((req.get("limits") or {}).get("output_bytes", limits.OUTPUT_BYTES))
    uid = 0 if req.get("trusted") is True else RUN_UID

    def read_back():  # every process of the call is dead: the files hold still
        for name in req.get("return_files") or []:
            try:
                data = _read_back(cwd, _safe_path(cwd, name)[len(cwd) + 1:], cap, uid)
            except (OSError, ValueError):
                continue
            if data is not None:
                files[name] = base64.b64encode(data).decode()

    health = _health(oom, uids, before_wipe=read_back)
    res["files"] = files
    return {"ok": True, "result": res, "health": health}


def _remove_dir(path):
    _wipe(path)
    try:
        os.rmdir(path)
    except OSError:
        pass


# ----------------------------------------------------------------------------- sessions
def _session_loop(ctl):
    """The persistent interpreter: run cells sent on `ctl` in one namespace."""
    import builtins
    import types

    _python_signals()
    _python_stdio()
    ns = types.ModuleType("__main__")
    ns.__builtins__ = builtins
    sys.modules["__main__"] = ns
    sys.argv = ["session"]
    sys.path.insert(0, os.getcwd())
    cell = 0
    while True:
        msg = read_frame(ctl)
        if msg is None:
            os._exit(0)
        cell += 1
        cpu_used = resource.getrusage(resource.RUSAGE_SELF).ru_utime + resource.getrusage(resource.RUSAGE_SELF).ru_stime
        soft = int(cpu_used + float(msg.get("cpu_s", 10)) + 1)
        try:
            resource.setrlimit(resource.RLIMIT_CPU, (soft, resource.getrlimit(resource.RLIMIT_CPU)[1]))
        except (ValueError, OSError):
            pass
        stdin = msg.get("stdin") or ""
        rfd, wfd = os.pipe()
        if len(stdin) < 60000:
            os.write(wfd, stdin.encode("utf-8", "surrogateescape"))
        os.close(wfd)
        os.dup2(rfd, 0)
        os.close(rfd)
        rc = 0
        try:
            code = compile(msg.get("code", ""), f"<cell {cell}>", "exec")
            exec(code, ns.__dict__)
        except SystemExit as exc:
            rc = exit_code(exc)
        except BaseException as exc:  # noqa: B036
            print_exc(exc)
            rc = 1
        flush()
        write_frame(ctl, {"rc": rc})


def _session_start(lim):
    cwd = os.path.join(WORKROOT, "session")
    os.makedirs(cwd, 0o700, exist_ok=True)
    os.chown(cwd, RUN_UID, RUN_UID)
    parent, child = socket.socketpair()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        desc = {"kind": "session", "uid": RUN_UID, "cwd": cwd, "lim": dict(lim, cpu_s=1e6)}
        pid = _fork_call(desc, [null, out_w, err_w, child.fileno()])
    finally:
        child.close()
        for fd in (null, out_w, err_w):
            os.close(fd)
    parent.setblocking(False)  # written and read only within a cell's deadline (see _supervise)
    # the interpreter is the template's child: its pidfd names it alone; where the kernel has no pidfds
    # (gVisor), its pid and start time do (the template may reap it once it ends, and the pid be reused)
    pidfd = pidfd_open(pid)
    start = None
    if pidfd is None:
        try:
            start = proc_identity(pid)[0]
        except OSError:
            pass  # it ended already: nothing is signalled by its pid, and its cell reports that
    return {"pid": pid, "pidfd": pidfd, "start": start, "ctl": parent.detach(), "out": out_r, "err": err_r,
            "lim": lim}


def _signal_session(s, sig):
    """SIGSTOP (freeze) or SIGCONT (thaw) the session's interpreter, all its threads at once."""
    try:
        if s["pidfd"] is None:
            if proc_identity(s["pid"])[0] == s["start"]:
                os.kill(s["pid"], sig)
        else:
            signal.pidfd_send_signal(s["pidfd"], sig)
    except OSError:
        pass  # it died: its cell reports that


_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_of(pid):
    """CPU seconds of process `pid` (all its threads) and of the children it reaped; 0 once gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])) / _TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


def _session_cpu(s):
    """CPU seconds of the session: its interpreter (and what it reaped) and its live processes. A child
    killed after an earlier cell and reaped in this one is charged to this one: the session's own time."""
    keep = _keep()
    return _cpu_of(s["pid"]) + sum(_cpu_of(p) for p in other_pids(keep) if uid_of(p) == RUN_UID)


def _session_kill():
    global _SESSION
    s = _SESSION
    _SESSION = None
    if s is None:
        return
    try:
        os.killpg(s["pid"], signal.SIGKILL)
    except OSError:
        pass
    _TEMPLATE.wait(s["pid"])
    for fd in (s["ctl"], s["out"], s["err"], s["pidfd"]):
        if fd is None:
            continue
        try:
            os.close(fd)
        except OSError:
            pass
    _clean_uids((RUN_UID,))
    _kill_all()
    _remove_dir(os.path.join(WORKROOT, "session"))


def op_session_run(req):
    global _SESSION
    code = req.get("code")
    if not isinstance(code, str):
        return {"ok": False, "error": "malformed request: 'code' must be a string"}
    try:
        lim = _limits(req)
    except (TypeError, ValueError, AttributeError) as exc:
        return {"ok": False, "error": f"malformed request: {exc}"}
    restarted = False
    if _SESSION is None or req.get("reset"):
        restarted = _SESSION is not None
        _session_kill()
        _SESSION = _session_start(lim)
    s = _SESSION
    oom_before = oom_count()
    t0 = time.monotonic()
    cell = frames.encode({"code": code, "stdin": req.get("stdin") or "", "cpu_s": lim["cpu_s"]})
    # between cells the interpreter is stopped (and whatever it started: the cleaner killed the rest);
    # the cell's CPU limit counts the session's time, threads and children included (read every
    # CPU_TICK_S), and holds where SIGXCPU is ignored
    _signal_session(s, signal.SIGCONT)
    budget = _cpu_of(s["pid"]) + lim["cpu_s"] + 1.0  # between cells nothing else of it lives (bar zombies)
    res = _supervise(s["pid"], (s["out"], s["err"]), t0 + lim["timeout_s"], lim["output_bytes"], ctl=s["ctl"],
                     send=cell, over_cpu=lambda: _session_cpu(s) > budget)
    _signal_session(s, signal.SIGSTOP)
    msg = res["ctl"]
    alive = msg is not None and "rc" in msg and res["reason"] is None
    if alive:
        res["wstatus"] = (int(msg["rc"]) & 0xFF) << 8
    else:
        pid = s["pid"]
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        res["wstatus"] = _TEMPLATE.wait(pid)
        if res["reason"] == "output_limit":
            res["wstatus"] = None
    status, exit_code, oom = _classify(res, oom_before)
    if not alive:
        _session_kill()
    out = {"stdout": _decode(res["out"]), "stderr": _decode(res["err"]), "exit_code": exit_code,
           "status": status, "duration_s": time.monotonic() - t0,
           "stdout_truncated": res["out_trunc"], "stderr_truncated": res["err_trunc"], "files": {}}
    health = _health(oom)
    return {"ok": True, "result": out, "health": health, "state_lost": not alive, "restarted": restarted}


def op_session_stop(req):
    _session_kill()
    return {"ok": True, "health": _health(False)}


def handle(req):
    if "__error__" in req:
        return {"ok": False, "error": req["__error__"]}
    op = req.get("op")
    if _REFUSED is not None:
        return {"ok": False, "error": f"sandbox refused to start: {_REFUSED}", "refused": True}
    if op == "ping":
        return {"ok": True, "pid": os.getpid(), "uid": os.getuid(), "run_uid": RUN_UID}
    if op == "run":
        return op_run(req)
    if op == "session_run":
        return op_session_run(req)
    if op == "session_stop":
        return op_session_stop(req)
    if op == "health":
        return {"ok": True, "health": _health(False)}
    return {"ok": False, "error": f"malformed request: unknown op {op!r}"}


def main(argv):
    global _IN, _OUT, WORKROOT, WIPE_TMP, _REFUSED, _TEMPLATE
    args = list(argv)
    nproc, gvisor_rules, budget, per_process = None, False, None, 0
    while args:
        a = args.pop(0)
        if a == "--workroot":
            WORKROOT = args.pop(0)
        elif a == "--wipe-tmp":
            WIPE_TMP = True
        elif a == "--oom-file":
            OOM_FILES[:] = [args.pop(0)]
        elif a == "--site":  # the packages programs may import beyond the standard library
            sys.path.append(args.pop(0))
        elif a == "--nproc":  # processes per uid, where no pids cgroup of the sandbox's own bounds them
            nproc = int(args.pop(0))
        elif a == "--gvisor-filter":  # no mq_open (no wipe sees a queue there), clone3 ENOSYS (common.py)
            gvisor_rules = True
        elif a == "--memory-budget":  # where no memory cgroup of the sandbox's own bounds it (memguard.py)
            budget = int(args.pop(0))
            OOM_FILES[:] = [memguard.COUNT_FILE]
        elif a == "--process-memory":  # what gVisor charges a process beyond Linux (memguard.py)
            per_process = int(args.pop(0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
    import atexit  # noqa: F401 - preload what forked children need, so they share it
    import ctypes  # noqa: F401
    import fcntl  # noqa: F401
    import io  # noqa: F401
    import stat  # noqa: F401
    import threading  # noqa: F401
    import traceback  # noqa: F401
    import types  # noqa: F401
    # what the judge harness and typical programs import: loaded once here, shared by every fork
    for name in ("bisect", "collections", "copy", "functools", "heapq", "itertools", "math", "random", "re",
                 "string", "typing"):
        __import__(name)
    _REFUSED = _harden()
    if _REFUSED is None:
        _REFUSED = _bound(nproc, gvisor_rules)
    scrub_environ()  # its variables stay in os.environ; /proc/1/environ shows zeros (gVisor lets anyone read it)
    _IN, _OUT = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    if _REFUSED is None:
        _REFUSED = _own_workroot()
    if _REFUSED is None:
        try:  # fds 0-2 (inherited by the cleaners and the template) open for no one through /proc/1/fd
            null = sink(WORKROOT)
        except OSError as exc:
            _REFUSED = f"the executor's sink did not open: {exc}"
        else:
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.close(null)
    if _REFUSED is None:
        try:  # before any request is read, and while no untrusted process exists
            for uid in UNTRUSTED_UIDS:
                _CLEANERS[uid] = Cleaner.start(uid)
        except (OSError, ValueError, IndexError) as exc:
            _REFUSED = f"the cleaners did not start: {exc}"
    if _REFUSED is None:
        try:  # before any request is read: its memory never holds one
            _TEMPLATE = ForkServer(_call_child, "the call template")
        except (OSError, RuntimeError) as exc:
            _REFUSED = f"the call template did not start: {exc}"
    if _REFUSED is None and budget is not None:
        try:  # a thread: started after the last fork of the executor itself (the template forks calls)
            _GUARD[0] = memguard.MemoryGuard(budget, per_process, UNTRUSTED_UIDS)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            _REFUSED = f"the memory guard did not start: {exc!r}"
    if _REFUSED is None:
        _BASE_TASKS[0] = tasks()  # this sandbox's tasks when nothing runs (helpers outside it included)
        _protected(WORKROOT)  # the interpreter's prefixes resolved before any program runs
    while True:
        req = read_frame(_IN)
        if req is None:
            break
        if req.get("op") == "exit":
            break
        guard = _GUARD[0]
        if guard is not None:
            guard.busy.set()
        try:
            resp = handle(req)
        except Exception as exc:  # a bug or a sandbox fault: report it, keep serving
            resp = {"ok": False, "error": f"executor error: {type(exc).__name__}: {exc}", "fault": True,
                    "health": {"healthy": False, "reason": "executor error"}}
        if guard is not None:
            guard.busy.clear()
        resp["id"] = req.get("id")
        write_frame(_OUT, resp)
    if _REFUSED is None:
        _session_kill()
        _clean_uids(UNTRUSTED_UIDS)
        _kill_all()
    if req is not None:
        write_frame(_OUT, {"ok": True})


if __name__ == "__main__":
    main(sys.argv[1:])
