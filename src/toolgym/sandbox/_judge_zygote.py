"""The judge zygote: a clean interpreter that forks one child per test.

Standard library only; the harness starts it as ``python -I -S -c SOURCE SOCK SYSPATH``
before it reads any secret, so its memory (and every child's) holds no test, expected
output or nonce. Forking a warm interpreter costs ~1 ms where a fresh ``python`` costs
tens of ms. Requests arrive on the SOCK_SEQPACKET socket SOCK as JSON with the child's
fds attached (stdin, stdout, stderr[, ctl, res]); the reply is {"pid"} then {"exit"}.

Child kinds: "boot" (function mode: program in over ctl fd 3, "loaded" out on res fd 4,
test in, pass message out only after the test returned normally), "py" (a stdio
program run like ``python -I main.py``), "exec" (a compiled binary), "checker" (a
trusted custom checker; the job on stdin, the answer on fd 3).
"""

# What test code commonly uses: loaded here so the snapshot that is restored before a
# test covers it, and so children do not pay for the imports.
import bisect  # noqa: F401
import builtins
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
import types
import typing  # noqa: F401

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
NOBODY = 65534


def _libc():
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True)
    except Exception:
        return None


LIBC = _libc()


# ----------------------------------------------------------------------------- child setup
def _setup(req, fds, sock_fd):
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
    if req.get("drop_uid"):
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    if LIBC is not None:
        LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # Non-dumpable (inherited from the zygote; set again to be sure): other processes of
        # the same uid (another job's test) cannot open this one's /proc/<pid>/mem or fd/.
        LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    os.environ.clear()
    os.environ.update({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": req["cwd"], "LANG": "C.UTF-8",
                       "LC_ALL": "C.UTF-8", "TMPDIR": "/tmp", "PYTHONHASHSEED": "0"})
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(open(0, "rb", closefd=False), encoding="utf-8")
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(open(1, "wb", closefd=False), encoding="utf-8")
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(open(2, "wb", closefd=False), encoding="utf-8",
                                                   errors="backslashreplace", line_buffering=True)
    import atexit

    atexit._clear()


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


# ----------------------------------------------------------------------------- stdio python
def _run_py(path):
    """Run a program as `python -I main.py` would."""
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    sys.argv = [path]
    rc = 0
    try:
        with open(path, "rb") as fh:
            code = compile(fh.read(), path, "exec")
        exec(code, main.__dict__)
    except SystemExit as exc:
        c = exc.code
        rc = 0 if c is None else (c & 0xFF if isinstance(c, int) else 1)
        if not isinstance(c, int) and c is not None:
            try:
                sys.stderr.write(str(c) + "\n")
            except BaseException:
                pass
    except BaseException as exc:  # noqa: B036 - mirror the interpreter's top level
        try:
            import traceback

            sys.stderr.write("".join(traceback.format_exception(type(exc), exc, exc.__traceback__.tb_next)))
        except BaseException:
            sys.stderr.write(type(exc).__name__ + "\n")
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


# ----------------------------------------------------------------------------- custom checker
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
    _flush()
    os._exit(0)


# ----------------------------------------------------------------------------- function mode
def _version_reader():
    """A reader of CPython's dict version tag (PEP 509), which changes on every write to the
    dict: restore() skips the dicts whose tag did not move, without touching (and so copying
    after fork) their items. None where the layout is not the known one."""
    try:
        import ctypes

        if sys.implementation.name != "cpython" or not (3, 11) <= sys.version_info[:2] <= (3, 13) \
                or ctypes.sizeof(ctypes.c_void_p) != 8 or "free-threading" in sys.version:
            return None
        at = ctypes.c_uint64.from_address

        def read(d):
            return at(id(d) + 24).value  # ob_refcnt, ob_type, ma_used, then ma_version_tag

        probe, mod = {}, types.ModuleType("probe")
        seen = [read(probe), read(mod.__dict__)]
        probe["x"] = 1
        mod.x = 1
        seen += [read(probe), read(mod.__dict__)]
        probe["x"] = 2
        seen.append(read(probe))
        return read if seen[0] != seen[2] != seen[4] and seen[1] != seen[3] else None
    except Exception:
        return None


def _snapshot():
    """The pristine state restored before every test; taken once, in the zygote, then frozen."""
    ver = _version_reader()
    tag = ver if ver is not None else (lambda d: None)
    pristine = dict(builtins.__dict__)
    modules = [(m, dict(m.__dict__), m.__dict__, tag(m.__dict__)) for m in list(sys.modules.values())
               if m is not None and isinstance(getattr(m, "__dict__", None), dict)]
    classes = []  # Python classes of those modules, whose attributes a program could patch
    for _m, d, _real, _t in modules:
        for v in d.values():
            if isinstance(v, type) and v.__flags__ & 512 and not v.__flags__ & 256 \
                    and v.__dict__.get("__module__") == d.get("__name__"):
                real = gc.get_referents(v.__dict__)
                real = real[0] if len(real) == 1 and type(real[0]) is dict else None
                classes.append((v, dict(v.__dict__), real, tag(real) if real is not None else None))
    return pristine, modules, classes, dict(sys.modules), ver, tag(builtins.__dict__)


SNAPSHOT = None


def _boot():
    """Function mode. Everything needed later is captured in locals before the program runs."""
    rd, wr, ex, bexc, aexc, mexc = os.read, os.write, os._exit, BaseException, AssertionError, MemoryError
    tp, strt, dct, lst, ln, rep = type, str, dict, list, len, repr
    dumps, loads, setitimer, setsig, getsig = json.dumps, json.loads, signal.setitimer, signal.signal, \
        signal.getsignal
    handlers = {}
    for sig in range(1, signal.NSIG):
        try:
            h = getsig(sig)
        except (ValueError, OSError):
            continue
        if h is not None:
            handlers[sig] = h  # as a fresh interpreter has them
    settrace, setprofile, gccb = sys.settrace, sys.setprofile, gc.callbacks
    ctl, res = 3, 4
    streams = (sys.stdin, sys.stdout, sys.stderr)

    def recv():
        buf = b""
        while ln(buf) < 5:
            chunk = rd(ctl, 5 - ln(buf))
            if not chunk:
                ex(70)
            buf += chunk
        n = int.from_bytes(buf[1:5], "big")
        tag, parts, got = buf[:1], [], 0
        while got < n:
            chunk = rd(ctl, min(n - got, 1 << 20))
            if not chunk:
                ex(70)
            parts.append(chunk)
            got += ln(chunk)
        return tag, b"".join(parts)

    def send(tag, payload=b""):
        data = tag + ln(payload).to_bytes(4, "big") + payload
        while data:
            data = data[wr(res, data):]

    def describe(e):
        """Exception type and plain arguments only: no submission __str__ runs here."""
        try:
            name = tp.__dict__["__name__"].__get__(tp(e))
        except bexc:
            name = "Exception"
        try:
            args = bexc.__dict__["args"].__get__(e)
            msg = "; ".join(a if tp(a) is strt else rep(a) for a in args if tp(a) in (strt, int, float, bool))
        except bexc:
            msg = ""
        return (name + (": " + msg if msg else ""))[:400].encode("utf-8", "replace")

    pristine, modules, classes, sys_modules, ver, builtins_tag = SNAPSHOT
    for m, d, _real, _t in modules:
        if m is sys:  # this child's own streams, set up after the snapshot was taken
            d.update({k: getattr(sys, k) for k in ("stdin", "stdout", "stderr", "__stdin__", "__stdout__",
                                                    "__stderr__")})
    stdlib = os.path.dirname(os.__file__) + "/"
    modtype, getdict = types.ModuleType, types.ModuleType.__dict__["__dict__"].__get__
    missing = object()

    def third_party(m):
        """A genuine module from outside the pure-Python standard library."""
        try:
            if tp(m) is not modtype:
                return False
            f = getdict(m).get("__file__")
            return tp(f) is strt and (not f.startswith(stdlib) or "-packages/" in f or "/lib-dynload/" in f)
        except bexc:
            return False

    def hook(event, args):
        if event == "sys.addaudithook":
            raise RuntimeError("toolgym judge: audit hooks are not allowed in submissions")

    sys.addaudithook(hook)

    def restore():
        settrace(None)
        setprofile(None)
        for which in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF):
            setitimer(which, 0)
        for sig, h in handlers.items():
            if getsig(sig) is not h:
                try:
                    setsig(sig, h)
                except bexc:
                    pass
        del gccb[:]
        bd = builtins.__dict__
        if ver is None or ver(bd) != builtins_tag:
            bd.clear()
            bd.update(pristine)
        for m, d, real, t in modules:
            if ver is not None and ver(real) == t:
                continue
            md = m.__dict__
            for k, v in d.items():
                if md.get(k, md) is not v:
                    md[k] = v
        for c, d, real, t in classes:
            if ver is not None and real is not None and ver(real) == t:
                continue
            cd = c.__dict__
            for k in lst(cd):
                if k not in d and k != "__slotnames__":
                    try:
                        delattr(c, k)
                    except bexc:
                        pass
            for k, v in d.items():
                if cd.get(k, missing) is not v:
                    try:
                        setattr(c, k, v)
                    except bexc:
                        pass
        sm = sys.modules
        for name in lst(sm):
            # the standard library modules the program imported (and could have patched)
            # are imported afresh by the test; third-party packages cannot always be.
            if name not in sys_modules and not third_party(sm[name]):
                del sm[name]
        sm.update(sys_modules)
        sys.stdin, sys.stdout, sys.stderr = streams

    tag, program = recv()
    ns = {"__name__": "__submission__", "__builtins__": builtins}
    try:
        code = compile(program.decode("utf-8", "replace"), "<submission>", "exec")
        del program
        exec(code, ns)
    except mexc:
        restore()
        send(b"M", b"MemoryError while loading the program")
        ex(1)
    except bexc as e:
        restore()
        send(b"E", describe(e))
        ex(1)
    restore()
    send(b"L")
    tag, payload = recv()
    token, test = payload[:32], loads(payload[32:])
    del payload
    if test["kind"] == "call":
        try:
            fn = eval(test["call"], ns)
            value = fn(*test["args"], **test["kwargs"])
        except mexc:
            restore()
            send(b"M", b"MemoryError")
            ex(1)
        except bexc as e:
            restore()
            send(b"F", b"R" + describe(e))
            ex(1)
        restore()
        try:
            out, kind = dumps(value, allow_nan=True), b"J"
        except bexc:
            try:
                out = rep(value)[:400]
            except bexc:
                out = "<unprintable>"
            kind = b"X"
        send(b"V", token + kind + out.encode("utf-8", "replace"))
        ex(0)
    tns = {k: v for k, v in ns.items() if k not in pristine and k != "__builtins__"}
    tns["__builtins__"] = dct(pristine)
    tns["__name__"] = "__test__"
    try:
        tcode = compile(test["code"], "<test>", "exec")
        exec(tcode, tns)
    except mexc:
        restore()
        send(b"M", b"MemoryError")
        ex(1)
    except aexc as e:
        restore()
        send(b"F", b"W" + describe(e))
        ex(1)
    except bexc as e:
        restore()
        send(b"F", b"R" + describe(e))
        ex(1)
    send(b"A", token)
    ex(0)


# ----------------------------------------------------------------------------- server
def _serve(sock):
    while True:
        try:
            msg, fds, _flags, _addr = socket.recv_fds(sock, 65536, 8)
        except OSError:
            os._exit(0)
        if not msg:
            os._exit(0)
        req = json.loads(msg)
        pid = os.fork()
        if pid == 0:
            try:
                _setup(req, fds, sock.fileno())
                kind = req["kind"]
                if kind == "boot":
                    _boot()
                elif kind == "py":
                    _run_py(req["path"])
                elif kind == "checker":
                    _run_checker()
                else:
                    os.execve(req["argv"][0], req["argv"], dict(os.environ))
            except BaseException as e:  # noqa: B036
                try:
                    os.write(2, (f"judge child setup failed: {e!r}\n").encode())
                except BaseException:
                    pass
            os._exit(72)
        for fd in fds:
            os.close(fd)
        sock.send(json.dumps({"pid": pid}).encode())
        _, status = os.waitpid(pid, 0)
        sock.send(json.dumps({"exit": status}).encode())


def main():
    sock_fd, path = int(sys.argv[1]), json.loads(sys.argv[2])
    sys.path[:] = [p for p in path if isinstance(p, str)]
    if LIBC is not None:
        LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # Non-dumpable from the start, so every child is too from its first instruction: no
        # window in which another job's process could open its /proc/<pid>/mem or fd/.
        LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    sock = socket.socket(fileno=sock_fd)
    global SNAPSHOT
    SNAPSHOT = _snapshot()
    gc.collect()
    gc.freeze()  # children never scan (and so never copy) the zygote's objects
    sock.send(b'{"ready": true}')
    _serve(sock)


if __name__ == "__main__":
    main()
