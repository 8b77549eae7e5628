"""What runs in a call's own process, a fresh fork of the call template (forkserver.py): its limits,
signals, streams and environment, then the program (Python in the forked interpreter, else exec) or a
session's interpreter loop. Also the executor's request framing, which that loop shares. Stdlib only."""

import json
import os
import resource
import signal
import sys

import exec_state as state
import frames
import limits
from common import drop_to, exit_code, flush, print_exc, run_as_main
from forkserver import description, place

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


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


def call_limits(req):
    lim = req.get("limits") or {}
    timeout = float(lim.get("timeout_s", limits.TIMEOUT_S))
    cpu = lim.get("cpu_s")
    return {
        "timeout_s": timeout,
        "cpu_s": float(cpu) if cpu is not None else timeout,
        "memory_mb": int(lim.get("memory_mb", limits.MEMORY_MB)),
        "output_bytes": int(lim.get("output_bytes", limits.OUTPUT_BYTES)),
        "file_bytes": int(lim.get("file_bytes", limits.FILE_BYTES)),
        "nproc": int(lim["nproc"]) if lim.get("nproc") else state.NPROC[0],
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


def call_child(fds):
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
