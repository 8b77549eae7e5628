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
  cleaners (one per untrusted uid, see cleaner.Cleaner) are forked at start-up, before any
  request: cleaning up never forks, so a program that fills the process table cannot stop
  it, and no program can signal or trace a cleaner (its real and saved uids are its own).
  Trusted calls (the judge harness) get the cleaners' sockets as fds 3 and 4. The executor then proves the sandbox clean (no process but its own, empty
  dirs, no IPC object, no OOM kill, free disk); the reply says "healthy": false
  otherwise, and the host replaces the sandbox.

This file is the start-up and the requests; each concern has a file of its own, imported by bare name
(toolgym.sandbox.scripts ships them all): exec_state.py (what the executor holds), exec_harden.py (the
hardening checks), exec_child.py (what runs in a call's own process, the session interpreter included),
exec_supervise.py (a call's run: fork, read under caps, classify), exec_clean.py (clean-up and the proof
of it, a call's files) and exec_session.py (the stateful session).
"""

import base64
import os
import resource
import signal
import sys

import exec_state as state
import limits
import memguard
from cleaner import Cleaner
from common import OOM_FILES, RUN_UID, UNTRUSTED_UIDS, oom_count, scrub_environ, sink, tasks
from exec_child import call_child, call_limits, read_frame, write_frame
from exec_clean import (
    check_health,
    clean_uids,
    kill_all,
    protected,
    read_file_back,
    remove_dir,
    safe_path,
    write_file,
)
from exec_harden import bound, harden, own_workroot
from exec_session import op_session_run, op_session_stop, session_kill
from exec_supervise import run_one
from forkserver import ForkServer


def op_run(req):
    language = req.get("language", "python")
    if language not in ("python", "cpp", "bash"):
        return {"ok": False, "error": f"unknown language {language!r}; use one of python, cpp, bash"}
    code = req.get("code")
    if not isinstance(code, str):
        return {"ok": False, "error": "malformed request: 'code' must be a string"}
    try:
        lim = call_limits(req)
        argv = [str(a) for a in (req.get("argv") or [])]
    except (TypeError, ValueError, AttributeError) as exc:
        return {"ok": False, "error": f"malformed request: {exc}"}
    # trusted: toolgym's own judge harness, which runs as the sandbox's root and hands its
    # test processes the untrusted uids itself. Only the host can ask for it.
    trusted = req.get("trusted") is True
    uid = 0 if trusted else RUN_UID
    if state.SESSION is not None:
        session_kill()
    state.SEQ[0] += 1
    cwd = os.path.join(state.WORKROOT, f"call-{state.SEQ[0]}")
    os.mkdir(cwd, 0o700)
    os.chown(cwd, uid, uid)
    oom_before = oom_count()
    base = {"uid": uid, "cwd": cwd}
    res = None
    uids = UNTRUSTED_UIDS if trusted else (RUN_UID,)
    try:
        for name, b64 in (req.get("files") or {}).items():
            p = safe_path(cwd, name)
            write_file(p, base64.b64decode(b64, validate=False), uid, cwd)
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
            write_file(src, code.encode("utf-8", "surrogateescape"), uid, cwd)
            if language == "cpp":
                comp_lim = dict(lim, timeout_s=max(lim["timeout_s"], float(req.get("compile_timeout_s", 30))),
                                memory_mb=max(lim["memory_mb"], limits.COMPILE_MEMORY_MB), cpu_s=max(lim["cpu_s"], 30.0),
                                output_bytes=min(lim["output_bytes"], 64 << 10),
                                file_bytes=max(lim["file_bytes"], 64 << 20))
                flags = [str(f) for f in (req.get("cflags") or ["-O2", "-std=c++17", "-pipe"])]
                res, oom = run_one(dict(base, kind="exec", argv=["/usr/bin/g++", *flags, "-o", "main", "main.cpp"]),
                                    None, comp_lim, oom_before)
                if res["status"] != "ok":
                    if res["status"] == "error":
                        res["stderr"] = "compilation failed:\n" + res["stderr"]
                    return _finish(res, cwd, req, oom, uids)
                clean_uids(uids)  # nothing of the compiler may run on beside the program
                res, oom = run_one(dict(base, kind="exec", argv=[os.path.join(cwd, "main"), *argv]), fd, lim,
                                    oom_before)
            elif language == "bash":
                res, oom = run_one(dict(base, kind="exec", argv=["/bin/bash", src, *argv]), fd, lim, oom_before)
            else:
                res, oom = run_one(dict(base, kind="python", path=src, argv=argv), fd, lim, oom_before)
        finally:
            os.close(fd)
        return _finish(res, cwd, req, oom, uids)
    except (ValueError, TypeError, AttributeError) as exc:  # bad files: nothing ran yet
        if res is not None:
            raise
        remove_dir(cwd)
        return {"ok": False, "error": f"malformed request: {exc}"}


def _finish(res, cwd, req, oom, uids):
    files = {}
    cap = int((req.get("limits") or {}).get("output_bytes", limits.OUTPUT_BYTES))
    uid = 0 if req.get("trusted") is True else RUN_UID

    def read_back():  # every process of the call is dead: the files hold still
        for name in req.get("return_files") or []:
            try:
                data = read_file_back(cwd, safe_path(cwd, name)[len(cwd) + 1:], cap, uid)
            except (OSError, ValueError):
                continue
            if data is not None:
                files[name] = base64.b64encode(data).decode()

    health = check_health(oom, uids, before_wipe=read_back)
    res["files"] = files
    return {"ok": True, "result": res, "health": health}


def handle(req):
    if "__error__" in req:
        return {"ok": False, "error": req["__error__"]}
    op = req.get("op")
    if state.REFUSED is not None:
        return {"ok": False, "error": f"sandbox refused to start: {state.REFUSED}", "refused": True}
    if op == "ping":
        return {"ok": True, "pid": os.getpid(), "uid": os.getuid(), "run_uid": RUN_UID}
    if op == "run":
        return op_run(req)
    if op == "session_run":
        return op_session_run(req)
    if op == "session_stop":
        return op_session_stop(req)
    if op == "health":
        return {"ok": True, "health": check_health(False)}
    return {"ok": False, "error": f"malformed request: unknown op {op!r}"}


def _options(argv):
    """The host's options: (nproc, gvisor_rules, memory budget, per-process memory); the rest set state."""
    args = list(argv)
    nproc, gvisor_rules, budget, per_process = None, False, None, 0
    while args:
        a = args.pop(0)
        if a == "--workroot":
            state.WORKROOT = args.pop(0)
        elif a == "--wipe-tmp":
            state.WIPE_TMP = True
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
    return nproc, gvisor_rules, budget, per_process


def _preload():
    """Load once what forked children need, so they share it."""
    import atexit  # noqa: F401
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


def _start(budget, per_process):
    """Everything forked or started before any request is read, each step only while all before held (else
    state.REFUSED says why): the sink as fds 0-2, the cleaners, the call template, the memory guard."""
    if state.REFUSED is None:
        state.REFUSED = own_workroot()
    if state.REFUSED is None:
        try:  # fds 0-2 (inherited by the cleaners and the template) open for no one through /proc/1/fd
            null = sink(state.WORKROOT)
        except OSError as exc:
            state.REFUSED = f"the executor's sink did not open: {exc}"
        else:
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            os.close(null)
    if state.REFUSED is None:
        try:  # before any request is read, and while no untrusted process exists
            for uid in UNTRUSTED_UIDS:
                state.CLEANERS[uid] = Cleaner.start(uid)
        except (OSError, ValueError, IndexError) as exc:
            state.REFUSED = f"the cleaners did not start: {exc}"
    if state.REFUSED is None:
        try:  # before any request is read: its memory never holds one
            state.TEMPLATE = ForkServer(call_child, "the call template")
        except (OSError, RuntimeError) as exc:
            state.REFUSED = f"the call template did not start: {exc}"
    if state.REFUSED is None and budget is not None:
        try:  # a thread: started after the last fork of the executor itself (the template forks calls)
            state.GUARD[0] = memguard.MemoryGuard(budget, per_process, UNTRUSTED_UIDS)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            state.REFUSED = f"the memory guard did not start: {exc!r}"
    if state.REFUSED is None:
        state.BASE_TASKS[0] = tasks()  # this sandbox's tasks when nothing runs (helpers outside it included)
        protected(state.WORKROOT)  # the interpreter's prefixes resolved before any program runs


def _serve(stream_in, stream_out):
    """Answer requests one at a time until the stream ends or says "exit"; the last request read."""
    while True:
        req = read_frame(stream_in)
        if req is None or req.get("op") == "exit":
            return req
        guard = state.GUARD[0]
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
        write_frame(stream_out, resp)


def main(argv):
    nproc, gvisor_rules, budget, per_process = _options(argv)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))
    _preload()
    state.REFUSED = harden()
    if state.REFUSED is None:
        state.REFUSED = bound(nproc, gvisor_rules)
    scrub_environ()  # its variables stay in os.environ; /proc/1/environ shows zeros (gVisor lets anyone read it)
    stream_in, stream_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    _start(budget, per_process)
    req = _serve(stream_in, stream_out)
    if state.REFUSED is None:
        session_kill()
        clean_uids(UNTRUSTED_UIDS)
        kill_all()
    if req is not None:
        write_frame(stream_out, {"ok": True})


if __name__ == "__main__":
    main(sys.argv[1:])
