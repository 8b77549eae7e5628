"""The judge's fork server: a clean process that forks one process per test role.

The harness forks it at its start, before it reads the spec, so its memory holds no
program, test, expected output or nonce; it runs as the sandbox's root. Forking a warm
interpreter costs ~1 ms where a fresh ``python`` costs tens of ms. Requests arrive on a
SOCK_SEQPACKET socket as JSON with the child's fds attached; the reply is {"pid"}, and
{"exit", "pid"} when that child has ended. A child drops to the request's uid before it
runs anything.

Child kinds:
- "cand": the submission (function mode), uid 65534. fd 3 brings the program; fd 4 is its
  end of the call channel to the evaluator (see rpc.py). It never sees a test, an
  expected value or a verdict channel.
- "eval": the trusted evaluator (function mode), uid 65533. fd 3 brings the test; the
  verdict goes out on fd 4; fd 5 is its end of the call channel.
- "py" / "exec": a stdio program, as ``python -I main.py`` would run it / a binary; also a
  Kattis output validator (uid 65533), with the request's argv.
- "checker": a trusted custom checker (uid 65533); the job on stdin, the answer on fd 3.
"""

# What programs and tests commonly use: loaded here so children do not pay for the imports.
import bisect  # noqa: F401
import collections  # noqa: F401
import copy  # noqa: F401
import fcntl
import functools  # noqa: F401
import gc
import heapq  # noqa: F401
import io
import itertools  # noqa: F401
import json
import math  # noqa: F401
import os
import random  # noqa: F401
import re  # noqa: F401
import resource
import signal
import socket
import string  # noqa: F401
import sys
import typing  # noqa: F401

from common import PR_SET_DUMPABLE, PR_SET_PDEATHSIG, drop_to, flush, prctl, run_as_main
from rpc import evaluate, serve_candidate


def _setup(req, fds):
    """In a fresh child: own session, the fds at 0.., limits, then the request's uid."""
    os.setsid()
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 16) for fd in fds]
    for target, fd in enumerate(high):
        os.dup2(fd, target)
    os.closerange(len(high), 1 << 16)

    def clamp(which, value):
        hard = resource.getrlimit(which)[1]
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(which, (value, value))

    if req.get("mem"):
        clamp(resource.RLIMIT_AS, int(req["mem"]))
    clamp(resource.RLIMIT_CPU, int(req["cpu"]))
    if req.get("fsize"):
        clamp(resource.RLIMIT_FSIZE, int(req["fsize"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    os.chdir(req["cwd"])
    with open("/proc/self/oom_score_adj", "w") as fh:
        fh.write("1000")  # the OOM killer takes a test process, never the harness
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    drop_to(int(req["uid"]))
    prctl(PR_SET_DUMPABLE, 0)  # no process of another test or job may open its /proc entries
    os.environ.clear()
    os.environ.update({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": req["cwd"], "LANG": "C.UTF-8",
                       "LC_ALL": "C.UTF-8", "TMPDIR": "/tmp", "PYTHONHASHSEED": "0"})
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(open(0, "rb", closefd=False), encoding="utf-8")
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(open(1, "wb", closefd=False), encoding="utf-8")
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(open(2, "wb", closefd=False), encoding="utf-8",
                                                   errors="backslashreplace", line_buffering=True)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    import atexit

    atexit._clear()


def _run_py(path, argv=None, script_dir=False):
    """Run a stdio program as `python -I main.py` would (a Python output validator as `python
    validate.py args`: its own folder first on sys.path, for the modules beside it)."""
    sys.argv = list(argv or [path])
    if script_dir:
        sys.path.insert(0, os.path.dirname(path))
    run_as_main(path, path)


def _run_checker():
    job = json.loads(sys.stdin.read())
    ns = {"__name__": "__checker__"}
    sys.stdout = sys.stderr
    try:
        exec(compile(job["checker"], "<checker>", "exec"), ns)
        r = ns["check"](job["input"], job["expected"], job["got"])
        ok, msg = r if isinstance(r, tuple) else (r, "")
        out = {"ok": bool(ok), "message": str(msg)[:400]}
    except BaseException as e:  # noqa: B036
        out = {"ok": False, "error": (type(e).__name__ + ": " + str(e))[:400]}
    os.write(3, json.dumps(out).encode())
    flush()
    os._exit(0)


def _read_all(fd):
    chunks = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def _serve(sock):
    """Fork a child per request; report each child's exit as it happens ({"exit", "pid"})."""
    import select

    live = {}  # pidfd -> pid
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    while True:
        for fd, _ev in poller.poll():
            if fd in live:
                pid = live.pop(fd)
                poller.unregister(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                sock.send(json.dumps({"exit": status, "pid": pid}).encode())
                continue
            try:
                msg, fds, _flags, _addr = socket.recv_fds(sock, 65536, 8)
            except OSError:
                os._exit(0)
            if not msg:
                os._exit(0)
            req = json.loads(msg)
            try:
                pid = os.fork()
            except OSError as e:  # the process table is full: that test cannot run, the zygote goes on
                for fd2 in fds:
                    os.close(fd2)
                sock.send(json.dumps({"pid": -1, "error": str(e)}).encode())
                continue
            if pid == 0:
                try:
                    sock.close()
                    for pfd in live:
                        os.close(pfd)
                    _child(req, fds)
                except BaseException as e:  # noqa: B036
                    try:
                        os.write(2, (f"judge child setup failed: {e!r}\n").encode())
                    except BaseException:
                        pass
                os._exit(72)
            for fd2 in fds:
                os.close(fd2)
            pfd = os.pidfd_open(pid)
            live[pfd] = pid
            poller.register(pfd, select.POLLIN)
            sock.send(json.dumps({"pid": pid}).encode())


def _child(req, fds):
    _setup(req, fds)
    kind = req["kind"]
    if kind == "cand":
        serve_candidate(_read_all(3).decode("utf-8", "replace"), 4)
    elif kind == "eval":
        evaluate(json.loads(_read_all(3)), 4, 5)
    elif kind == "py":
        _run_py(req["path"], req.get("argv"), bool(req.get("script_dir")))
    elif kind == "checker":
        _run_checker()
    else:
        os.execve(req["argv"][0], req["argv"], dict(os.environ))


def serve(sock):
    """Run as the fork server on `sock` (a SOCK_SEQPACKET socket) until it closes."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    prctl(PR_SET_DUMPABLE, 0)
    gc.collect()
    gc.freeze()  # children never scan (and so never copy) the zygote's objects
    sock.send(b'{"ready": true}')
    _serve(sock)


class ZygoteDied(RuntimeError):
    """The fork server is gone: no test can run in this harness any more."""


class Zygote:
    """The harness's handle on the fork server, which it forks before it reads the spec: the
    server holds none of it."""

    def __init__(self):
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            try:
                parent.close()
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):  # never the verdict stream
                    os.dup2(null, fd)
                keep = child.fileno()
                os.closerange(3, keep)
                os.closerange(keep + 1, 1 << 16)
                serve(child)
            finally:
                os._exit(127)
        child.close()
        self.pid, self.sock, self.exits = pid, parent, {}
        if self._recv().get("ready") is not True:
            raise RuntimeError("the judge zygote did not start")

    def _recv(self):
        msg = self.sock.recv(65536)
        if not msg:
            raise ZygoteDied("the judge zygote died")
        return json.loads(msg)

    def pump(self):
        """Take one message (an exit report) from the zygote."""
        m = self._recv()
        if "exit" in m:
            self.exits[m["pid"]] = m["exit"]
        return m

    def request(self, req, fds):
        """Ask for a child; its pid comes later, in order, from `next_pid`."""
        socket.send_fds(self.sock, [json.dumps(req).encode()], fds)
        for fd in fds:
            os.close(fd)

    def next_pid(self):
        """The next child's pid, or -1 when it could not be forked."""
        while True:
            m = self.pump()
            if "pid" in m and "exit" not in m:
                return m["pid"]

    def wait(self, pid):
        while pid not in self.exits:
            self.pump()
        return self.exits.pop(pid)

    def close(self):
        self.sock.close()
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except OSError:
            pass
