"""The judge harness: runs INSIDE the sandbox as a trusted call (the sandbox's root). Stdlib only.

It makes itself non-dumpable and a child subreaper (failing closed), and before it reads
anything starts the zygote, the fork server that forks every test process (zygote.py,
forkserver.py). Only then it reads ``judge_spec.json`` (programs, tests, expected outputs,
limits, the per-call nonce; a root-only file) into memory and deletes it. No process that runs submission code ever holds an expected
value, a test's code or the verdict stream:
- stdio mode: the program (uid 65534) gets the input; the harness compares the output.
  A custom checker runs as uid 65533 in a process of its own.
- function mode: per test, a CANDIDATE process (uid 65534) loads the program and answers
  calls; an EVALUATOR process (uid 65533) runs the test code against proxies of the
  program's names and writes the verdict on a pipe only it and the harness hold
  (see rpc.py). The harness compares call-form return values itself.

Jobs (submissions) of one call run strictly one after the other. After each job every
process of uids 65534 and 65533 is killed at once (kill(-1) by the executor's standing
cleaners, whose sockets the harness gets as fds 3 and 4: cleaning never forks), the IPC
objects they own or created are removed and /tmp, /var/tmp, /dev/shm, /dev/mqueue and the
harness's own dir are wiped (every place a program can write: the work root is root's), all
within the job's own time; after each test of a job its processes are killed. So nothing of
one job reaches the next. A job after which the sandbox cannot be proven clean (an IPC object
left included) pays for it: its done line says "dirty" (the host fails it) and no further job
runs here (the host judges them elsewhere). A test during which the OOM killer struck is MLE,
and no job runs after that one here either (its done line says "last").
Verdicts go to the harness's own stdout, one JSON line per test prefixed by the nonce,
then a done line per job and an all_done line. A test whose result the harness cannot
check (a value no checker can hold, a process that cannot be started) gets RE: the
harness never crashes on what a program returns.
"""

import errno
import json
import os
import signal
import socket
import sys
import time

import frames
import kattis_validation
import limits
from cleaner import Cleaner
from common import (
    EVAL_UID,
    OOM_FILES,
    PR_GET_DUMPABLE,
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    RUN_UID,
    UNTRUSTED_UIDS,
    oom_count,
    prctl,
    tasks,
)
from forkserver import ServerDied
from judge_checks import Checks, excerpt
from judge_procs import NO_SUBREAPER, ForkFailed, Processes, Run, Unclean
from zygote import start as start_zygote

SPEC_FILE = "judge_spec.json"


class Harness(Processes, Checks):
    """The judge of one call: its jobs one after the other, each test by its mode (here); the processes are
    judge_procs.py's part of it, the verdicts judge_checks.py's."""

    def __init__(self, nonce, zygote, root, cleaners):
        self.nonce, self.zygote, self.root, self.cleaners = nonce, zygote, root, cleaners
        self.base_tasks = tasks()
        self.spec = None

    # ---- output channel ------------------------------------------------------------
    def emit(self, obj):
        data = (self.nonce + " " + json.dumps(obj) + "\n").encode()  # ASCII: json escapes the rest
        while data:
            data = data[os.write(1, data):]

    # ---- modes -----------------------------------------------------------------------
    def prepare(self):
        """Write/compile the program for stdio mode: (kind, path) or a CE message."""
        lang, prog = self.spec["language"], self.spec["program"]
        d = self.make_dir(RUN_UID)
        if lang == "python":
            path = os.path.join(d, "main.py")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
            with os.fdopen(fd, "w", encoding="utf-8", errors="surrogatepass") as f:
                f.write(prog)  # text no encoder takes (a lone surrogate) is the program's SyntaxError
            return ("py", path), None
        src, exe = os.path.join(d, "main.cpp"), os.path.join(d, "main")
        fd = os.open(src, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogatepass") as f:
            f.write(prog)
        # compiled as the untrusted uid: an #include of a secret file only finds nothing
        run = Run()
        limit = self.spec["compile_time_limit_s"]
        self.start(run, "exec", RUN_UID, d, limit, limits.COMPILE_MEMORY_MB, argv=["/usr/bin/g++", "-O2", "-std=c++17", "-o", exe, src])
        (pid,) = self.started(run)
        self.supervise(run, pid, time.monotonic() + limit)
        if run.timed_out:
            return None, "compilation timed out"
        status = run.status[pid]
        if status is None or not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0 or not os.path.exists(exe):
            msg = bytes(run.out.get("exec.stderr", b"")).decode("utf-8", "replace").replace(d + "/", "").strip()
            if os.WIFEXITED(status or 0) and os.WEXITSTATUS(status or 0) == 72 and "No such file" in msg:
                msg = "g++ is not installed in this sandbox"
            return None, excerpt(msg, 600) or "compilation failed"
        return ("exec", exe), None

    def run_stdio(self, how, test):
        kind, target = how
        run = Run()
        d = self.make_dir(RUN_UID, run)
        launched = time.monotonic()  # the program may run before started() returns: its time counts from here
        self.start(run, kind, RUN_UID, d, self.limit_s, self.memory_mb, stdin=test["input"].encode("utf-8", "surrogatepass"),
                   path=target, argv=[target])
        (pid,) = self.started(run)
        start = time.monotonic()
        self.supervise(run, pid, start + self.limit_s)
        elapsed = time.monotonic() - launched
        stderr = bytes(run.out.get(f"{kind}.stderr", b"")).decode("utf-8", "replace")
        got = bytes(run.out.get(f"{kind}.stdout", b"")).decode("utf-8", "replace")
        v = {"time_s": round(elapsed, 4), "got": excerpt(got), "expected": excerpt(test["output"])}
        crash = self.crash_verdict(run, run.status.get(pid), stderr)
        if crash is not None:
            v["status"], v["message"] = crash
            return v
        ok, msg = self.compare(test["input"], test["output"], got)
        v["status"], v["message"] = ("AC", "") if ok else ("WA", msg) if ok is False else ("JE", msg)
        if ok is None:
            self.checker_errors.append(msg)
        return v

    def run_function(self, test):
        """One test: candidate (uid 65534) and evaluator (uid 65533) joined by a socket."""
        run = Run()
        cand_end, eval_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        prog = self.spec["program"].encode("utf-8", "surrogatepass")
        payload = {k: test[k] for k in ("kind", "code", "call", "args", "kwargs") if k in test}
        start = time.monotonic()
        # the evaluator first: the zygote's last fork of a test is the program's, so a program that
        # fills the process table at once cannot keep the trusted side from starting
        self.start(run, "eval", EVAL_UID, self.job_dir(EVAL_UID), self.limit_s, limits.TRUSTED_MEMORY_MB,
                   inputs=[json.dumps(payload).encode()], outputs=("verdict",), extra=[eval_end.detach()])
        self.start(run, "cand", RUN_UID, self.job_dir(RUN_UID), self.limit_s, self.memory_mb,
                   inputs=[prog], extra=[cand_end.detach()])
        ev, cand = self.started(run)
        self.supervise(run, ev, start + self.limit_s)
        elapsed = time.monotonic() - start
        stderr = bytes(run.out.get("cand.stderr", b"")).decode("utf-8", "replace")
        raw = bytes(run.out.get("eval.verdict", b""))  # one frame: a tag byte, then text (rpc.evaluate)
        head = frames.HEAD.size
        tag, text = (raw[head:head + 1], raw[head + 1:].decode("utf-8", "replace")) if len(raw) > head else (b"", "")
        v = {"time_s": round(elapsed, 4), "got": None, "expected": None}
        if "expected" in test:
            v["expected"] = excerpt(json.dumps(test["expected"]))
        if run.timed_out or (run.over is not None and run.over.startswith("cand.")):
            v["status"], v["message"] = self.crash_verdict(run, run.status.get(cand), stderr)
            return v
        if tag == b"A":
            v["status"], v["message"] = "AC", ""
        elif tag == b"W":
            v["status"], v["message"] = "WA", text or "assertion failed"
        elif tag in (b"M", b"O"):
            v["status"], v["message"] = "MLE", f"memory limit exceeded ({self.memory_mb} MiB)"
        elif tag == b"E":
            v["status"], v["message"] = "RE", "program failed to load: " + text
        elif tag == b"R":
            v["status"], v["message"] = "RE", text
        elif tag == b"V":
            v["got"] = excerpt(text)
            try:
                got = json.loads(text)
            except ValueError:  # cannot happen for a whole value; a broken one fails, never passes
                v["status"], v["message"] = "RE", "the return value could not be read"
                return v
            ok = self.values_equal(got, test["expected"])
            v["status"] = "AC" if ok else "WA"
            v["message"] = "" if ok else "expected {}, got {}".format(
                excerpt(json.dumps(test["expected"]), 60), excerpt(text, 60))
        elif tag == b"X":
            v["got"] = excerpt(text)
            v["status"], v["message"] = "WA", "return value is not JSON-serializable: " + excerpt(text, 80)
        else:  # the program ended (or was killed) during the test, or the evaluator failed
            crash = self.crash_verdict(run, run.status.get(cand), stderr, cand)
            v["status"], v["message"] = crash or ("RE", "the process exited before the test finished")
        return v

    def run_job(self, j, job):
        """Judge one submission: one line per test, then a done line. False when the sandbox could not
        be proven clean after it (its done line then says "dirty")."""
        self.spec = job
        self.limit_s = float(job["time_limit_s"])
        self.memory_mb = int(job["memory_mb"])
        self.output_bytes = self.cap = int(job["output_bytes"])
        self.checker_errors = []
        self.dirs = {}
        start = time.monotonic()
        oom_before = oom_count()
        dirty = None
        try:
            self.run_tests(j, job)
            self.clear_all()  # its time (a deep tree to wipe) is this job's
        except Unclean as exc:
            dirty = str(exc)
        done = {"done": True, "j": j, "elapsed_s": round(time.monotonic() - start, 4),
                "checker_errors": self.checker_errors[:3]}
        if dirty:
            done["dirty"] = dirty
        elif oom_count() > oom_before:
            # its verdicts stand (MLE where the kill struck), but what else the OOM killer took cannot be
            # known: no further job runs here (the host judges them on a fresh sandbox)
            done["last"] = "the sandbox ran out of memory"
        self.emit(done)
        return dirty is None and "last" not in done

    def run_tests(self, j, job):
        how, ce = self.prepare() if job["mode"] == "stdio" else (None, None)
        self.validator, je = kattis_validation.prepare(self, job["validator"]) if job.get("validator") and ce is None \
            else (None, None)
        if je is not None:
            self.checker_errors.append(je)
        stop = bool(job["stop_at_first_failure"])
        failed = False
        for i, test in enumerate(job["tests"]):
            if ce is not None or je is not None:
                v = {"status": "CE" if je is None else "JE", "message": ce or je, "time_s": 0.0, "got": None,
                     "expected": None}
            elif failed and stop:
                v = {"status": "SKIPPED", "message": "skipped after an earlier failure", "time_s": 0.0,
                     "got": None, "expected": None}
            else:
                v = self.run_test(how, test)
            v["j"], v["i"] = j, i
            failed = failed or v["status"] != "AC"
            self.emit(v)

    def run_test(self, how, test):
        """One test's verdict: MLE when the sandbox's OOM killer struck during it (whatever the program
        printed), RE when the harness cannot check its result (never a crash)."""
        before = oom_count()
        v = self._run_test(how, test)
        if oom_count() > before and v["status"] in ("AC", "WA", "TLE", "RE", "OLE"):
            v["status"], v["message"] = "MLE", "killed: the sandbox ran out of memory during this test"
        return v

    def _run_test(self, how, test):
        try:
            if self.spec.get("validator") and self.spec["validator"]["interactive"]:
                return kattis_validation.interact(self, how, self.validator, test)
            if self.spec["mode"] == "stdio":
                return self.run_stdio(how, test)
            return self.run_function(test)
        except (Unclean, ServerDied):
            raise
        except Exception as exc:  # noqa: BLE001 - e.g. a value no comparison can take; never its text
            self.clear_processes()
            why = str(exc) if isinstance(exc, ForkFailed) else f"the judge could not check this test's result " \
                f"({type(exc).__name__})"
            return {"status": "RE", "message": why, "time_s": 0.0, "got": None, "expected": None}



def load_spec(path=SPEC_FILE):
    """Read the spec into memory and delete it from disk before anything else runs."""
    with open(path, "rb") as f:
        data = f.read()
    os.unlink(path)
    return json.loads(data)


def _cleaners():
    """The executor's standing cleaners of uids 65534 and 65533: their sockets are fds 3 and 4, their
    pids in TG_CLEANERS."""
    import socket
    import stat

    pids = [int(p) for p in os.environ.get("TG_CLEANERS", "").split(",") if p]
    if len(pids) != len(UNTRUSTED_UIDS):
        raise OSError("no standing cleaners were handed to the judge harness")
    out = {}
    for fd, uid, pid in zip((3, 4), UNTRUSTED_UIDS, pids, strict=True):
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            raise OSError(f"fd {fd} is not a cleaner's socket")
        out[uid] = Cleaner(uid, socket.socket(fileno=fd), pid)
    return out


def _harden():
    """Non-dumpable, a subreaper, and root: else the harness refuses (fail closed)."""
    if os.geteuid() != 0:
        return "the judge harness must run as the sandbox's root (a trusted call)"
    prctl(PR_SET_DUMPABLE, 0)
    if prctl(PR_GET_DUMPABLE, 0) != 0:
        return "the judge harness is still dumpable"
    try:
        prctl(PR_SET_CHILD_SUBREAPER, 1)
    except OSError as exc:  # gVisor has no subreapers (EINVAL): orphans go to PID 1, the executor, which reaps them
        if exc.errno != errno.EINVAL:
            raise
        NO_SUBREAPER[0] = True
    return None


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    try:
        why = _harden()
    except OSError as exc:
        why = f"hardening failed: {exc}"
    cleaners = None
    if why is None:
        try:
            cleaners = _cleaners()
        except (OSError, ValueError) as exc:
            why = str(exc)
    OOM_FILES[:] = [p for p in os.environ.get("TG_OOM_FILES", "").split(":") if p] or OOM_FILES
    zygote = start_zygote() if why is None else None  # before the spec is read
    spec = load_spec(sys.argv[1] if len(sys.argv) > 1 else SPEC_FILE)
    nonce = spec["nonce"]
    if why is not None:
        sys.stdout.write(nonce + " " + json.dumps({"fatal": why}) + "\n")
        sys.stdout.flush()
        os._exit(3)
    os.chmod(".", 0o711)  # test processes (other uids) traverse this to their own dirs
    root = os.path.join(os.getcwd(), "tgjudge-" + os.urandom(6).hex())  # binaries may run here
    os.mkdir(root, 0o711)
    harness = Harness(nonce, zygote, root, cleaners)
    try:
        for j, job in enumerate(spec["jobs"]):
            if not harness.run_job(j, job):
                return  # not proven clean: the jobs left are judged elsewhere
    finally:
        zygote.close()
    harness.emit({"all_done": True})


if __name__ == "__main__":
    main()
