"""The in-sandbox executor: a tiny server that lives inside one sandbox.

Standard library only. The host injects this file's text as `python3 -I -c SOURCE`, so
the image carries no toolgym code. It is PID 1 of its PID namespace (a container, or a
bubblewrap sandbox with --as-pid-1): signals from sandboxed code to it are ignored by the
kernel, and `kill(-1)` reaches every other process of the sandbox.

Protocol: frames on fd 0 (requests) and fd 1 (responses), each a 4-byte big-endian
length and a UTF-8 JSON object. One request at a time. Python calls fork this already
started interpreter (much cheaper than starting a new one); C++ and bash calls fork and
exec. Each call gets a private work dir, a new session (process group), rlimits, and
pipes for its output, read under a byte cap. Afterwards every other process of the
sandbox is killed and the work dir and /tmp are wiped, and the reply says whether the
sandbox is still healthy (no leftover process, no OOM, free disk).
"""

import base64
import json
import os
import resource
import select
import signal
import struct
import sys
import time

MAX_FRAME = 256 << 20
WORKROOT = "/work"
WIPE_TMP = False
OOM_FILES = ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events")
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_IN = _OUT = -1
_SESSION = None  # dict(pid, ctl, out, err) of the live session interpreter
_SEQ = [0]


# ----------------------------------------------------------------------------- framing
def _read_exact(fd, n):
    chunks, got = [], 0
    while got < n:
        b = os.read(fd, min(n - got, 1 << 20))
        if not b:
            return None
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


def read_frame(fd):
    head = _read_exact(fd, 4)
    if head is None:
        return None
    (n,) = struct.unpack(">I", head)
    if n > MAX_FRAME:
        while n > 0:  # drain it so the stream stays in sync
            chunk = _read_exact(fd, min(n, 1 << 20))
            if chunk is None:
                return None
            n -= len(chunk)
        return {"__error__": "frame too large"}
    body = _read_exact(fd, n)
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
    body = json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass")
    data = struct.pack(">I", len(body)) + body
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# ----------------------------------------------------------------------------- helpers
def _prctl(option, value):
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(option, value, 0, 0, 0)
    except Exception:
        pass


def _oom_count():
    for path in OOM_FILES:
        try:
            with open(path) as fh:
                for line in fh:
                    key, _, val = line.partition(" ")
                    if key == "oom_kill":
                        return int(val)
        except (OSError, ValueError):
            continue
    return 0


def _other_pids(keep):
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            pid = int(name)
            if pid != os.getpid() and pid not in keep:
                out.append(pid)
    return out


def _reap():
    """Collect zombies (we are PID 1, orphans land here). Returns {pid: status}."""
    done = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        done[pid] = status
    return done


def _kill_all(keep=(), patience=10.0):
    """Kill every process of the sandbox but us (and `keep`). True if none is left.

    Dying processes need CPU time to exit, and they share the sandbox's CPU quota with
    whatever ran: wait for them (with back-off) up to `patience` seconds."""
    keep = set(keep)
    deadline = time.monotonic() + patience
    pause = 0.0005
    while True:
        pids = _other_pids(keep)
        if not pids:
            return True
        if os.getpid() == 1 and not keep:
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
        else:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        _reap()
        if time.monotonic() > deadline:
            return not _other_pids(keep)
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
        _reap()


def _safe_path(root, name):
    if not isinstance(name, str) or not name or "\x00" in name:
        raise ValueError(f"bad file name {name!r}")
    if name.startswith("/") or any(part in ("..",) for part in name.split("/")):
        raise ValueError(f"file name {name!r} escapes the work dir")
    path = os.path.normpath(os.path.join(root, name))
    if not path.startswith(root + "/"):
        raise ValueError(f"file name {name!r} escapes the work dir")
    return path


_OWN_PREFIXES = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)} | {
    sys.prefix, sys.base_prefix, sys.exec_prefix}


def _rmtree(path):
    """Empty `path` (not removing it), also through dirs the program made unreadable."""
    try:
        entries = list(os.scandir(path))
    except PermissionError:
        try:
            os.chmod(path, 0o700)  # ours (same uid): make it listable again
            entries = list(os.scandir(path))
        except OSError:
            return
    except OSError:
        return
    for e in entries:
        if e.path == WORKROOT:
            continue  # never wipe the work root itself (it may live under /tmp)
        if any(p == e.path or p.startswith(e.path + "/") for p in _OWN_PREFIXES):
            continue  # the interpreter's own read-only prefix, re-exposed under /tmp (e.g. a CI clone)
        try:
            if e.is_dir(follow_symlinks=False):
                try:
                    os.chmod(e.path, 0o700)
                except OSError:
                    pass
                _rmtree(e.path)
                os.rmdir(e.path)
            else:
                os.unlink(e.path)
        except OSError:
            pass


def _decode(b):
    return b.decode("utf-8", "replace")


def _limits(req):
    lim = req.get("limits") or {}
    timeout = float(lim.get("timeout_s", 10.0))
    cpu = lim.get("cpu_s")
    return {
        "timeout_s": timeout,
        "cpu_s": float(cpu) if cpu is not None else timeout,
        "memory_mb": int(lim.get("memory_mb", 512)),
        "output_bytes": int(lim.get("output_bytes", 1 << 20)),
        "file_bytes": int(lim.get("file_bytes", 16 << 20)),
        "nproc": lim.get("nproc"),
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


def _child_common(cwd, stdin_fd, out_w, err_w, lim, address_space=True, keep_fd=None):
    """In a freshly forked child: new session, rlimits, stdio, no inherited fds."""
    os.setsid()
    _prctl(4, 1)  # dumpable again (the executor itself stays undumpable)
    try:
        with open("/proc/self/oom_score_adj", "w") as fh:
            fh.write("1000")
    except OSError:
        pass
    try:
        # Lowest CPU weight inside the sandbox's own cgroup: a fork bomb then cannot starve
        # the executor that has to kill it. It costs nothing when the executor is idle, and
        # the sandbox's share of the machine is set by its cgroup, not by this nice value.
        os.setpriority(os.PRIO_PROCESS, 0, 19)
    except OSError:
        pass
    os.chdir(cwd)
    os.dup2(stdin_fd if stdin_fd is not None else os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    if keep_fd is None:
        os.closerange(3, 1 << 16)
    else:
        os.closerange(3, keep_fd)
        os.closerange(keep_fd + 1, 1 << 16)
    for sig in _RESET_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    _set_rlimits(lim, address_space)


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


def _print_exc(exc):
    import traceback  # preloaded by main(): no allocation-heavy import after a MemoryError

    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == _print_exc.__code__.co_filename:
        tb = tb.tb_next  # hide executor frames
    te = traceback.TracebackException(type(exc), exc, tb)
    sys.stderr.write("".join(te.format()))


def _exit_code(exc):
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(str(code) + "\n")
    except Exception:
        pass
    return 1


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def _python_main(path, argv, cwd):
    """Run user code as `python3 -I main.py ARGV` would, in this forked interpreter."""
    import builtins
    import types

    os.environ.clear()
    os.environ.update(_env(cwd))
    _python_signals()
    _python_stdio()
    sys.argv = ["main.py", *argv]
    sys.path.insert(0, cwd)
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    rc = 0
    try:
        with open(path, "rb") as fh:
            src = fh.read()
        code = compile(src, "main.py", "exec")
        exec(code, main.__dict__)
    except SystemExit as exc:
        rc = _exit_code(exc)
    except BaseException as exc:  # noqa: B036 - mirror the interpreter's top level
        if isinstance(exc, MemoryError):
            main.__dict__.clear()  # free the program's data so the report itself can allocate
        try:
            _print_exc(exc)
        except MemoryError:
            os.write(2, b"MemoryError\n")
        rc = 1
    try:
        import threading

        threading._shutdown()
    except BaseException:
        pass
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        pass
    _flush()
    os._exit(rc)


# ----------------------------------------------------------------------------- supervision
def _supervise(pid, fds, deadline, cap, ctl=None):
    """Read `fds` (stdout, stderr) under a byte cap until `pid` exits (or `ctl` answers).

    Returns dict(out, err, status, truncated flags, wait status, ctl message)."""
    bufs = {fd: bytearray() for fd in fds}
    trunc = {fd: False for fd in fds}
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    pidfd = real_pidfd = None
    if ctl is None:
        try:
            pidfd = real_pidfd = os.pidfd_open(pid)
            poller.register(pidfd, select.POLLIN)
        except (AttributeError, OSError):
            pidfd = None
    else:
        poller.register(ctl, select.POLLIN | select.POLLHUP)
    open_fds = set(fds)
    reason = None
    wstatus = None
    ctl_msg = None
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                reason = "timeout"
                break
            wait_ms = min(left, 0.05 if pidfd is None and ctl is None else left) * 1000
            events = poller.poll(max(1, int(wait_ms)))
            for fd, _ev in events:
                if fd == pidfd:
                    poller.unregister(pidfd)
                    pidfd = -2
                elif fd == ctl:
                    ctl_msg = read_frame(ctl)
                    if ctl_msg is None:
                        ctl_msg = {"dead": True}
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
                if pidfd in (None, -2):
                    got, st = os.waitpid(pid, os.WNOHANG)
                    if got == pid:
                        wstatus = st
                if wstatus is not None:
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
    finally:
        if real_pidfd is not None:
            os.close(real_pidfd)
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
    oom = _oom_count() > oom_before
    err = res["err"][-4096:]
    if oom:  # the kernel's OOM killer struck during the call: that is why it failed
        status = "oom"
    elif res["reason"] == "timeout":
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


def _spawn(cwd, stdin_fd, lim, argv, py_path=None):
    """Fork a call: the Python interpreter itself when `py_path`, else exec `argv`."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            _child_common(cwd, stdin_fd, out_w, err_w, lim, address_space=True)
            if py_path is not None:
                _python_main(py_path, argv, cwd)
            else:
                os.execve(argv[0], argv, _env(cwd))
        except BaseException as exc:  # noqa: B036
            try:
                os.write(2, f"sandbox: cannot start program: {type(exc).__name__}: {exc}\n".encode())
            finally:
                os._exit(127)
        os._exit(127)
    os.close(out_w)
    os.close(err_w)
    return pid, out_r, err_r


def _run_one(cwd, stdin_fd, lim, argv, oom_before, py_path=None):
    t0 = time.monotonic()
    pid, out_r, err_r = _spawn(cwd, stdin_fd, lim, argv, py_path)
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
        try:
            _, res["wstatus"] = os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    status, exit_code, oom = _classify(res, oom_before)
    return {"stdout": _decode(res["out"]), "stderr": _decode(res["err"]), "exit_code": exit_code,
            "status": status, "duration_s": time.monotonic() - t0,
            "stdout_truncated": res["out_trunc"], "stderr_truncated": res["err_trunc"]}, oom


def _health(oom, keep=()):
    clean = _kill_all(keep)
    if WIPE_TMP:  # writable places outside the work dir: nothing may pass to the next call
        for d in ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue"):
            _rmtree(d)
    reasons = []
    if not clean:
        reasons.append("leftover processes")
    try:
        stale = [n for n in os.listdir(WORKROOT) if not (n == "session" and keep)]
    except OSError:
        stale = []
    if stale:
        reasons.append("work dir not clean")
    if oom:
        reasons.append("out of memory")
    for path in (WORKROOT, "/tmp"):
        try:
            st = os.statvfs(path)
            if st.f_bavail * st.f_frsize < (4 << 20):
                reasons.append(f"disk full at {path}")
        except OSError:
            pass
    return {"healthy": not reasons, "reason": ", ".join(reasons)}


# ----------------------------------------------------------------------------- requests
def op_run(req):
    global _SESSION
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
    if _SESSION is not None:
        _session_kill()
    _SEQ[0] += 1
    cwd = os.path.join(WORKROOT, f"call-{_SEQ[0]}")
    os.mkdir(cwd, 0o700)
    oom_before = _oom_count()
    try:
        for name, b64 in (req.get("files") or {}).items():
            p = _safe_path(cwd, name)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as fh:
                fh.write(base64.b64decode(b64))
        stdin_path = os.path.join(cwd, ".stdin")
        with open(stdin_path, "wb") as fh:
            fh.write(str(req.get("stdin") or "").encode("utf-8", "surrogateescape"))
        fd = os.open(stdin_path, os.O_RDONLY)  # kept open, unlinked: the program cannot see it
        os.unlink(stdin_path)
        try:
            ext = {"python": "main.py", "bash": "main.sh", "cpp": "main.cpp"}[language]
            src = os.path.join(cwd, ext)
            with open(src, "w", encoding="utf-8", errors="surrogateescape") as fh:
                fh.write(code)
            if language == "cpp":
                comp_lim = dict(lim, timeout_s=max(lim["timeout_s"], float(req.get("compile_timeout_s", 30))),
                                memory_mb=max(lim["memory_mb"], 2048), cpu_s=max(lim["cpu_s"], 30.0),
                                output_bytes=min(lim["output_bytes"], 64 << 10),
                                file_bytes=max(lim["file_bytes"], 64 << 20))
                flags = [str(f) for f in (req.get("cflags") or ["-O2", "-std=c++17", "-pipe"])]
                res, oom = _run_one(cwd, None, comp_lim, ["/usr/bin/g++", *flags, "-o", "main", "main.cpp"],
                                    oom_before)
                if res["status"] != "ok":
                    if res["status"] == "error":
                        res["stderr"] = "compilation failed:\n" + res["stderr"]
                    return _finish(res, cwd, req, oom)
                _kill_all()
                res, oom = _run_one(cwd, fd, lim, [os.path.join(cwd, "main"), *argv], oom_before)
            elif language == "bash":
                res, oom = _run_one(cwd, fd, lim, ["/bin/bash", src, *argv], oom_before)
            else:
                res, oom = _run_one(cwd, fd, lim, argv, oom_before, py_path=src)
        finally:
            os.close(fd)
        return _finish(res, cwd, req, oom)
    except (ValueError, TypeError, AttributeError) as exc:  # bad files: nothing ran yet
        _remove_dir(cwd)
        return {"ok": False, "error": f"malformed request: {exc}"}


def _finish(res, cwd, req, oom):
    _kill_all()  # nothing may still write to the files we read back
    files = {}
    cap = int((req.get("limits") or {}).get("output_bytes", 1 << 20))
    for name in req.get("return_files") or []:
        try:
            p = _safe_path(cwd, name)
            with open(p, "rb") as fh:
                files[name] = base64.b64encode(fh.read(cap)).decode()
        except (OSError, ValueError):
            continue
    res["files"] = files
    _remove_dir(cwd)
    return {"ok": True, "result": res, "health": _health(oom)}


def _remove_dir(path):
    try:
        os.chmod(path, 0o700)
    except OSError:
        pass
    _rmtree(path)
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
            rc = _exit_code(exc)
        except BaseException as exc:  # noqa: B036
            _print_exc(exc)
            rc = 1
        _flush()
        write_frame(ctl, {"rc": rc})


def _session_start(lim):
    import socket

    cwd = os.path.join(WORKROOT, "session")
    os.makedirs(cwd, 0o700, exist_ok=True)
    parent, child = socket.socketpair()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    cfd = child.detach()
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(cfd, 3)
            os.set_inheritable(3, True)
            _child_common(cwd, None, out_w, err_w, dict(lim, cpu_s=1e6), address_space=True, keep_fd=3)
            _session_loop(3)
        except BaseException as exc:  # noqa: B036
            os.write(2, f"sandbox: session failed: {exc}\n".encode())
        os._exit(1)
    os.close(cfd)
    os.close(out_w)
    os.close(err_w)
    return {"pid": pid, "ctl": parent.detach(), "out": out_r, "err": err_r, "lim": lim}


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
    for fd in (s["ctl"], s["out"], s["err"]):
        try:
            os.close(fd)
        except OSError:
            pass
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
    oom_before = _oom_count()
    t0 = time.monotonic()
    write_frame(s["ctl"], {"code": code, "stdin": req.get("stdin") or "", "cpu_s": lim["cpu_s"]})
    res = _supervise(s["pid"], (s["out"], s["err"]), t0 + lim["timeout_s"], lim["output_bytes"], ctl=s["ctl"])
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
        try:
            _, res["wstatus"] = os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        if res["reason"] == "output_limit":
            res["wstatus"] = None
    status, exit_code, oom = _classify(res, oom_before)
    if not alive:
        _session_kill()
    out = {"stdout": _decode(res["out"]), "stderr": _decode(res["err"]), "exit_code": exit_code,
           "status": status, "duration_s": time.monotonic() - t0,
           "stdout_truncated": res["out_trunc"], "stderr_truncated": res["err_trunc"], "files": {}}
    keep = (_SESSION["pid"],) if _SESSION else ()
    health = _health(oom, keep)
    return {"ok": True, "result": out, "health": health, "state_lost": not alive, "restarted": restarted}


def op_session_stop(req):
    _session_kill()
    return {"ok": True, "health": _health(False)}


def handle(req):
    if "__error__" in req:
        return {"ok": False, "error": req["__error__"]}
    op = req.get("op")
    if op == "ping":
        return {"ok": True, "pid": os.getpid(), "uid": os.getuid()}
    if op == "run":
        return op_run(req)
    if op == "session_run":
        return op_session_run(req)
    if op == "session_stop":
        return op_session_stop(req)
    if op == "health":
        return {"ok": True, "health": _health(False, (_SESSION["pid"],) if _SESSION else ())}
    return {"ok": False, "error": f"malformed request: unknown op {op!r}"}


def main(argv):
    global _IN, _OUT, WORKROOT, WIPE_TMP
    args = list(argv)
    drop = None
    while args:
        a = args.pop(0)
        if a == "--workroot":
            WORKROOT = args.pop(0)
        elif a == "--wipe-tmp":
            WIPE_TMP = True
        elif a == "--drop":
            drop = [int(x) for x in args.pop(0).split(":")]
        elif a == "--oom-file":
            globals()["OOM_FILES"] = (args.pop(0),)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
    import atexit  # noqa: F401 - preload what forked children need, so they share it
    import threading  # noqa: F401
    import traceback  # noqa: F401
    import types  # noqa: F401
    if drop is not None and os.getuid() == 0:
        os.setgroups([])
        os.setgid(drop[1])
        os.setuid(drop[0])
    _prctl(38, 1)  # PR_SET_NO_NEW_PRIVS
    _prctl(4, 0)  # PR_SET_DUMPABLE=0: sandboxed code cannot open /proc/1/fd (the channel)
    _IN, _OUT = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    os.makedirs(WORKROOT, exist_ok=True)
    while True:
        req = read_frame(_IN)
        if req is None:
            _session_kill()
            _kill_all()
            return
        if req.get("op") == "exit":
            _session_kill()
            _kill_all()
            write_frame(_OUT, {"ok": True})
            return
        try:
            resp = handle(req)
        except Exception as exc:  # a bug or a sandbox fault: report it, keep serving
            resp = {"ok": False, "error": f"executor error: {type(exc).__name__}: {exc}", "fault": True}
        resp["id"] = req.get("id")
        write_frame(_OUT, resp)


if __name__ == "__main__":
    main(sys.argv[1:])
