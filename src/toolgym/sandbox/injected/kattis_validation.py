"""Kattis-format output validation for the judge harness. Stdlib only; runs inside the sandbox.

- ``compare_default``: Kattis's default validator (tokens; case-insensitive unless
  ``case_sensitive``; ``space_change_sensitive``; float tolerances relative to the answer),
  computed by the harness itself: no process is involved.
- custom validators (``validator input answer feedback_dir [args] < team_output``, exit 42 =
  accept, 43 = wrong answer): written, and compiled when C++, as uid 65533 into a 0700 dir of
  that uid, once per job. Per test the harness writes the input and the answer into a fresh
  0700 dir of uid 65533 and runs the validator there as uid 65533 with the team output on
  stdin, after the submission (uid 65534) has ended: the submission cannot read or write the
  answer or the feedback dir, and only the validator's exit status, collected by the harness,
  decides. What the submission prints is never parsed for a verdict.
- interactive problems: validator (uid 65533) and submission (uid 65534) are joined by two
  pipes, and nothing else; the harness holds no end of them. Both are bounded by the
  submission's time limit (wall clock), each by its own CPU limit too.
"""

import hashlib
import json
import math
import os
import re
import time

import limits
from common import EVAL_UID, RUN_UID
from judge_procs import Run
from wiping import wipe

AC_EXIT, WA_EXIT = 42, 43
FEEDBACK_BYTES = 4096
_FLOAT = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?\Z")  # digit runs cannot trade digits
_CACHE = {}  # sources digest -> compiled validator bytes, for the later jobs of one call


def _float(tok):
    """The value of a float token as the default validator reads one (finite only), else None."""
    if not _FLOAT.match(tok):
        return None
    v = float(tok)
    return v if math.isfinite(v) else None


def _short(s, n=40):
    return s if len(s) <= n else s[:n] + "..."


def compare_default(expected, got, flags):
    """(ok, message) of Kattis's default output validator with `flags` (parsed on the host)."""
    spaces = bool(flags.get("space_change_sensitive"))
    case = bool(flags.get("case_sensitive"))
    abs_tol, rel_tol = flags.get("abs_tol"), flags.get("rel_tol")
    floats = abs_tol is not None or rel_tol is not None
    if spaces:
        exp, out = re.split(r"(\s+)", expected), re.split(r"(\s+)", got)
    else:
        exp, out = expected.split(), got.split()
    for i, (a, b) in enumerate(zip(exp, out, strict=False)):
        if spaces and (not a.strip() or not b.strip()):
            if a != b:
                return False, f"space change error at part {i + 1}: expected {a!r}, got {b!r}"
            continue
        ja = _float(a) if floats else None
        if ja is not None:
            tb = _float(b)
            if tb is None:
                return False, f"token {i + 1}: expected a float, got {_short(b)!r}"
            d = abs(ja - tb)
            if not ((abs_tol is not None and d <= abs_tol) or (rel_tol is not None and d <= rel_tol * abs(ja))):
                return False, f"token {i + 1}: too large difference: expected {a}, got {b}"
            continue
        if a != b and (case or a.lower() != b.lower()):
            return False, f"token {i + 1}: expected {_short(a)!r}, got {_short(b)!r}"
    if len(out) > len(exp):
        return False, "trailing output"
    if len(out) < len(exp):
        return False, "output ended while the answer had more"
    return True, ""


def _write(path, data, mode=0o444):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def prepare(h, spec):
    """Write (and compile) the job's validator: ((kind, path), None) or (None, error message)."""
    d = h.make_dir(EVAL_UID)
    sources = spec["sources"]
    for name, text in sources.items():
        _write(os.path.join(d, name), text.encode("utf-8"))
    if spec["language"] == "python":
        return ("py", os.path.join(d, spec["entry"])), None
    exe = os.path.join(d, "validator")
    key = hashlib.sha256(json.dumps(sources, sort_keys=True).encode()).hexdigest()
    if key in _CACHE:
        _write(exe, _CACHE[key], 0o555)
        return ("exec", exe), None
    units = sorted(os.path.join(d, n) for n in sources if n.endswith((".cc", ".cpp", ".cxx", ".c++", ".C")))
    run = Run()
    limit = h.spec["compile_time_limit_s"]
    h.start(run, "exec", EVAL_UID, d, limit, limits.COMPILE_MEMORY_MB, label="vcompile",
            argv=["/usr/bin/g++", "-O2", "-std=c++17", "-o", exe, *units])
    (pid,) = h.started(run)
    h.supervise(run, pid, time.monotonic() + limit)
    status = run.status[pid]
    if run.timed_out or status is None or not os.WIFEXITED(status) or os.WEXITSTATUS(status) or not os.path.exists(exe):
        msg = bytes(run.out.get("vcompile.stderr", b"")).decode("utf-8", "replace").replace(d + "/", "")
        first = next((ln for ln in msg.splitlines() if "error" in ln), msg.strip()[:300])
        return None, f"{spec['name']}: does not compile: " + (first or "g++ failed")[:300]
    with open(exe, "rb") as f:
        _CACHE[key] = f.read()
    return ("exec", exe), None


def _files(h, test):
    """A fresh 0700 dir of uid 65533 with the test's input and answer, and an empty feedback dir."""
    d = h.make_dir(EVAL_UID)
    _write(os.path.join(d, "input"), test["input"].encode("utf-8"))
    _write(os.path.join(d, "answer"), test["output"].encode("utf-8"))
    fb = os.path.join(d, "feedback")
    os.mkdir(fb, 0o700)
    os.chown(fb, EVAL_UID, EVAL_UID)
    return d, [os.path.join(d, "input"), os.path.join(d, "answer"), fb + "/"]


def _feedback(d):
    try:
        fd = os.open(os.path.join(d, "feedback", "judgemessage.txt"), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as f:
        return f.read(FEEDBACK_BYTES).decode("utf-8", "replace").strip()


def _discard(d):
    wipe(d)
    os.rmdir(d)


def _exit_code(status):
    return os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else None


def _judge_error(h, run, status, what):
    if run.timed_out:
        return f"{h.spec['validator']['name']}: timed out ({what})"
    err = bytes(run.out.get("val.stderr", b"")).decode("utf-8", "replace").strip()[-300:]
    code = _exit_code(status)
    how = f"exit code {code}" if code is not None else "a signal"
    return f"{h.spec['validator']['name']}: failed ({how}, expected exit 42 or 43): {err}"


def _own_time(h):
    """A validator's time per run, not counted against the submission: a trusted checker's (the spec's)."""
    return float(h.spec["checker_time_limit_s"])


def validate(h, how, test, got):
    """Run the validator on a finished submission's output: (True | False | None for a judge error, message)."""
    kind, path = how
    own = _own_time(h)
    d, argv = _files(h, test)
    run = Run()
    h.start(run, kind, EVAL_UID, os.path.dirname(path), own, limits.TRUSTED_MEMORY_MB,
            stdin=got.encode("utf-8"), label="val", script_dir=True,
            path=path, argv=[path, *argv, *h.spec["validator"]["args"]])
    (pid,) = h.started(run)
    h.supervise(run, pid, time.monotonic() + own)
    status, message = run.status.get(pid), _feedback(d)
    _discard(d)
    code = None if run.timed_out else _exit_code(status)
    if code == AC_EXIT:
        return True, ""
    if code == WA_EXIT:
        return False, message[:limits.MESSAGE_CHARS] or "rejected by the output validator"
    return None, _judge_error(h, run, status, f"{own:g}s")


def interact(h, sub_how, val_how, test):
    """One interactive test: the verdict dict (status, message, time_s).

    The validator's stdout is the program's stdin; the program's stdout reaches the validator
    through the harness, which forwards the bytes unread and gives the validator EOF only once
    the program has ENDED (as BAPCtools' relay does): so a program that crashes is seen to end
    first (RE) rather than as a validator's WA on a cut-off conversation. Then, as BAPCtools
    and DOMjudge rule: the validator ending first with WA is WA; a program that ends first
    badly is RE (or MLE); past the time limit is TLE; else the validator's verdict."""
    run = Run()
    own = _own_time(h)
    d, argv = _files(h, test)
    sd = h.make_dir(RUN_UID, run)
    to_val_r, to_val_w = os.pipe()
    to_sub_r, to_sub_w = os.pipe()
    os.set_blocking(to_val_w, False)
    run.writes[to_val_w] = bytearray()
    vkind, vpath = val_how
    skind, spath = sub_how
    start = time.monotonic()
    h.start(run, vkind, EVAL_UID, os.path.dirname(vpath), h.limit_s + own, limits.TRUSTED_MEMORY_MB,
            stdin_fd=to_val_r, stdout_fd=to_sub_w, label="val", path=vpath, script_dir=True,
            argv=[vpath, *argv, *h.spec["validator"]["args"]])
    h.start(run, skind, RUN_UID, sd, h.limit_s, h.memory_mb, stdin_fd=to_sub_r, label="sub", path=spath,
            argv=[spath])
    val, sub = h.started(run)
    run.relay = ("sub.stdout", to_val_w, sub)
    exits = h.zygote.exits
    h.supervise(run, val, start + h.limit_s, finish=False)
    if run.timed_out and sub in exits:  # the program is done in time; the validator gets its own time
        run.timed_out = False
        h.supervise(run, val, time.monotonic() + own, finish=False)
    val_timeout = run.timed_out and sub in exits
    code = _exit_code(exits.get(val))
    if code == AC_EXIT and sub not in exits:
        h.supervise(run, sub, start + h.limit_s, finish=False)  # the validator is content: the program must end
    sub_first = sub in exits and (val not in exits or list(exits).index(sub) < list(exits).index(val))
    elapsed = time.monotonic() - start
    aborted = run.timed_out and not val_timeout
    flooded = run.over is not None and run.over.startswith("sub.")
    vstatus = exits.get(val)
    h.end(run)
    message = _feedback(d)
    _discard(d)
    stderr = bytes(run.out.get("sub.stderr", b"")).decode("utf-8", "replace")
    crash = None if aborted else h.crash_verdict(run, run.status.get(sub), stderr, sub if sub_first else None)
    v = {"time_s": round(elapsed, 4), "got": None, "expected": None}
    if flooded:
        v["status"], v["message"] = "OLE", f"output limit exceeded ({h.output_bytes} bytes)"
    elif aborted:
        v["status"], v["message"] = "TLE", f"time limit exceeded ({h.limit_s:.2f}s)"
    elif code not in (AC_EXIT, WA_EXIT):
        h.checker_errors.append(_judge_error(h, run, vstatus, "interactive"))
        v["status"], v["message"] = "JE", h.checker_errors[-1]
    elif crash is not None and (sub_first or code == AC_EXIT):
        v["status"], v["message"] = crash
    elif code == WA_EXIT:
        v["status"], v["message"] = "WA", message[:limits.MESSAGE_CHARS] or "rejected by the output validator"
    else:
        v["status"], v["message"] = "AC", ""
    return v
