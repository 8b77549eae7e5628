"""The judge's zygote: the fork server (forkserver.py) that forks one process per test role.

The harness starts it at its start, before it reads the spec, so its memory holds no program, test,
expected output or nonce; it runs as the sandbox's root. What a child is to be (its kind, uid, dir,
limits, argv) reaches only that child, on the pipe of its request. A child drops to its uid before
it runs anything, dies with the zygote, and is non-dumpable.

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
import functools  # noqa: F401
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
import string  # noqa: F401
import sys
import typing  # noqa: F401

import limits
from common import PR_SET_DUMPABLE, PR_SET_PDEATHSIG, drop_to, flush, prctl, run_as_main
from forkserver import ForkServer, description, place
from rpc import evaluate, serve_candidate


def _setup(req, fds):
    """In a fresh child: own session, the fds at 0.., limits, then the request's uid."""
    os.setsid()
    place(fds)

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
        out = {"ok": bool(ok), "message": str(msg)[:limits.MESSAGE_CHARS]}
    except BaseException as e:  # noqa: B036
        out = {"ok": False, "error": (type(e).__name__ + ": " + str(e))[:limits.MESSAGE_CHARS]}
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


def _child(fds):
    """One test process, in a fresh fork of the zygote: its request from fds[0], its fds after that."""
    try:
        req = description(fds[0])
        _setup(req, fds[1:])
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
    except BaseException as e:  # noqa: B036
        try:
            os.write(2, (f"judge child setup failed: {e!r}\n").encode())
        except BaseException:  # noqa: B036
            pass
    os._exit(72)


def start():
    """Fork the zygote (call it before the spec is read): the harness's handle on it."""
    return ForkServer(_child, "the judge's zygote")
