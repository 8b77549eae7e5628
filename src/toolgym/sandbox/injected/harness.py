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
import select
import signal
import socket
import sys
import time

import frames
import kattis_validation
import limits
from common import (
    EVAL_UID,
    OOM_FILES,
    PR_GET_DUMPABLE,
    PR_SET_CHILD_SUBREAPER,
    PR_SET_DUMPABLE,
    RUN_UID,
    UNTRUSTED_UIDS,
    WIPE_DIRS,
    Cleaner,
    ipc_objects,
    listing,
    oom_count,
    prctl,
    protector,
    reap,
    tasks,
    wipe,
    zombies_of,
)
from forkserver import ServerDied
from zygote import start as start_zygote

SPEC_FILE = "judge_spec.json"
EXCERPT = 160
# where the kernel has no subreapers (gVisor), a test's orphans go to PID 1, the executor, which reaps them
# within its REAP_TICK_S: the harness waits that long for it, at most ORPHAN_WAIT_S
_NO_SUBREAPER = [False]
ORPHAN_WAIT_S = 5.0


def _excerpt(text, limit=EXCERPT):
    if text is None:
        return None
    return text if len(text) <= limit else text[:limit] + "..."


class Run:
    """Processes of one test, their pipes and dirs, and what came out of them."""

    def __init__(self):
        self.pids = []
        self.kinds = []  # of each child asked for, in order
        self.pending = 0
        self.dirs = []
        self.reads = {}  # fd -> (name, cap)
        self.writes = {}  # fd -> bytearray
        self.out = {}
        self.over = None  # the stream whose cap was passed
        self.timed_out = False
        self.status = {}
        self.killed = set()  # still running when the test ended, so killed by the harness
        self.relay = None  # (stream name, fd, pid): the stream is forwarded to fd, closed once pid has ended
        self.relayed = 0  # bytes forwarded (capped like any output)


kattis_validation.Run = Run


class Unclean(RuntimeError):
    """The sandbox cannot be proven clean after a job's processes: that job pays."""


class ForkFailed(RuntimeError):
    """A process of a test could not be forked (the sandbox's process table was full)."""


class Harness:
    def __init__(self, nonce, zygote, root, cleaners):
        self.nonce, self.zygote, self.root, self.cleaners = nonce, zygote, root, cleaners
        self.base_tasks = tasks()
        self.spec = None

    # ---- output channel ------------------------------------------------------------
    def emit(self, obj):
        data = (self.nonce + " " + json.dumps(obj) + "\n").encode()  # ASCII: json escapes the rest
        while data:
            data = data[os.write(1, data):]

    # ---- processes -------------------------------------------------------------------
    def make_dir(self, uid, run=None):
        d = os.path.join(self.root, "t" + os.urandom(6).hex())
        os.mkdir(d, 0o700)
        os.chown(d, uid, uid)
        if run is not None:
            run.dirs.append(d)
        return d

    def job_dir(self, uid):
        """A dir for the job's processes of `uid`, shared by its tests (removed between jobs)."""
        if uid not in self.dirs:
            self.dirs[uid] = self.make_dir(uid)
        return self.dirs[uid]

    def start(self, run, kind, uid, cwd, limit_s, memory_mb, stdin=None, inputs=(), outputs=(), extra=(),
              label=None, stdin_fd=None, stdout_fd=None, **kw):
        """Start one child; `inputs` are bytes fed to fds 3..; `outputs` names read from fds after
        them; its streams are named `label` (default: kind). stdin_fd/stdout_fd, when given, are
        its fds 0/1 (and closed here). Its pid is appended to run.pids once `started` collects it."""
        label = label or kind
        fds = []
        if stdin_fd is not None:
            fds.append(stdin_fd)
        elif stdin is None:
            fds.append(os.open(os.devnull, os.O_RDONLY))
        else:
            r, w = os.pipe()
            fds.append(r)
            run.writes[w] = bytearray(stdin)
        for name, cap in (("stdout", self.cap), ("stderr", self.cap)):
            if name == "stdout" and stdout_fd is not None:
                fds.append(stdout_fd)
                continue
            r, w = os.pipe()
            fds.append(w)
            run.reads[r] = (f"{label}.{name}", cap)
        for data in inputs:
            r, w = os.pipe()
            fds.append(r)
            run.writes[w] = bytearray(data)
        for name in outputs:
            r, w = os.pipe()
            fds.append(w)
            run.reads[r] = (f"{label}.{name}", 1 << 20)
        fds.extend(extra)
        req = {"kind": kind, "uid": uid, "cwd": cwd, "mem": memory_mb << 20 if memory_mb else 0,
               "cpu": int(limit_s) + 1, "fsize": self.spec.get("file_bytes", limits.FILE_BYTES), **kw}
        for fd in list(run.reads) + list(run.writes):
            os.set_blocking(fd, False)
        for fd, buf in list(run.writes.items()):  # pre-fill the pipes: the child need not wait for us
            try:
                del buf[:os.write(fd, buf[:65536])]
            except BlockingIOError:
                pass
        try:
            self.zygote.request(req, fds)
        finally:
            for fd in fds:
                os.close(fd)
        run.pending += 1
        run.kinds.append(label)

    def started(self, run):
        """The pids of the children asked for (in order), once the zygote has forked them. ForkFailed
        (after ending the ones that did start) when any could not be forked."""
        failed = False
        while run.pending:
            pid = self.zygote.next_pid()
            run.pending -= 1
            if pid > 0:
                run.pids.append(pid)
            else:
                failed = True
        if failed:
            self.end(run)
            raise ForkFailed("a process of this test could not be started (the sandbox's process limit)")
        return run.pids

    def supervise(self, run, until, deadline, finish=True):
        """Move data until process `until` ends (then drain briefly), a cap is passed, or the deadline;
        then end the test's processes (unless `finish` is false)."""
        poller = select.poll()
        for fd in run.reads:
            poller.register(fd, select.POLLIN)
        for fd in run.writes:
            poller.register(fd, select.POLLOUT)
        zfd = self.zygote.sock.fileno()
        poller.register(zfd, select.POLLIN)
        for name, _ in run.reads.values():
            run.out.setdefault(name, bytearray())
        drain_until = None
        prefix = run.kinds[run.pids.index(until)] + "."
        while run.over is None:
            now = time.monotonic()
            if run.relay and run.relay[2] in self.zygote.exits and not run.writes[run.relay[1]] \
                    and all(n != run.relay[0] for n, _ in run.reads.values()):
                fd, run.relay = run.relay[1], None  # the source is dead and drained: EOF for the reader
                try:
                    poller.unregister(fd)
                except KeyError:
                    pass
                os.close(fd)
                del run.writes[fd]
            if until in self.zygote.exits:
                # what `until` wrote is all that is needed (the others are killed next)
                drain_until = drain_until or now + 0.25
                if now >= drain_until or not any(n.startswith(prefix) for n, _ in run.reads.values()):
                    break
            elif now >= deadline:
                run.timed_out = True
                break
            wait = (drain_until if drain_until else deadline) - now
            for fd, _ev in poller.poll(max(0.0, wait) * 1000):
                if fd == zfd:
                    self.zygote.pump()
                elif fd in run.writes:
                    buf = run.writes[fd]
                    try:
                        del buf[:os.write(fd, buf[:65536])]
                    except BlockingIOError:
                        continue
                    except OSError:
                        buf.clear()
                        run.relay = None if run.relay and run.relay[1] == fd else run.relay
                    if not buf:
                        poller.unregister(fd)
                        if run.relay and run.relay[1] == fd:
                            continue  # kept open: its source may send more
                        os.close(fd)
                        del run.writes[fd]
                elif fd in run.reads:
                    name, cap = run.reads[fd]
                    try:
                        chunk = os.read(fd, 65536)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        poller.unregister(fd)
                        os.close(fd)
                        del run.reads[fd]
                        continue
                    if run.relay and run.relay[0] == name:
                        if not run.writes[run.relay[1]]:
                            poller.register(run.relay[1], select.POLLOUT)
                        run.writes[run.relay[1]] += chunk
                        run.relayed += len(chunk)
                        if run.relayed > cap:
                            run.over = name
                        continue
                    run.out[name] += chunk
                    if len(run.out[name]) > cap:
                        run.over = name
        if finish:
            self.end(run)

    def end(self, run):
        """Kill what is left of the test, collect exit statuses, close its pipes."""
        run.killed = {pid for pid in run.pids if pid not in self.zygote.exits}
        for pid in run.pids:
            for f in (os.killpg, os.kill):
                try:
                    f(pid, signal.SIGKILL)
                except OSError:
                    pass
        for pid in run.pids:
            run.status[pid] = self.zygote.wait(pid)
        for fd in list(run.reads) + list(run.writes):
            try:
                os.close(fd)
            except OSError:
                pass
        run.reads.clear()
        run.writes.clear()
        self.clear_processes()
        for d in run.dirs:  # every process is gone: the tree holds still
            wipe(d)
            os.rmdir(d)

    def clear_processes(self):
        """No process of an untrusted uid survives a test: the pids cgroup's exact count says
        when there is none (cheap), else each uid is killed all at once by its cleaner. Nor does
        its zombie: /proc lists one to the next job, whose processes' uid it has (a bit passed)."""
        reap()
        if self.base_tasks is not None and tasks() == self.base_tasks:
            return
        for uid in UNTRUSTED_UIDS:
            if not self.cleaners[uid].sweep():
                raise Unclean(f"processes of uid {uid} could not be killed" if self.cleaners[uid].intact()
                              else "a cleaner's scheduling was changed")
        reap()
        if _NO_SUBREAPER[0]:
            self.wait_for_reaper()

    @staticmethod
    def wait_for_reaper():
        """Where orphans go to the executor (no subreapers: gVisor), wait until it has reaped those of the
        untrusted uids (Unclean past ORPHAN_WAIT_S)."""
        deadline, pause = time.monotonic() + ORPHAN_WAIT_S, 0.0005
        while zombies_of(UNTRUSTED_UIDS):
            if time.monotonic() > deadline:
                raise Unclean("zombies of the untrusted uids were not reaped")
            time.sleep(pause)
            pause = min(pause * 2, 0.01)

    def clear_all(self):
        """After a job: no process, IPC object or file of an untrusted uid survives, and the cleaners
        are as they started (Unclean otherwise)."""
        self.clear_processes()
        for uid in UNTRUSTED_UIDS:
            if ipc_objects(uid) and not self.cleaners[uid].sweep():  # only the owner or creator may remove them
                raise Unclean(f"IPC objects of uid {uid} could not be removed")
            if not self.cleaners[uid].intact():
                raise Unclean("a cleaner's scheduling was changed")
        if ipc_objects():  # whoever owns it now: memory a batch-mate would miss
            raise Unclean("IPC objects are left")
        protected = protector(os.path.dirname(os.path.abspath(".")))
        reap()
        for d in (*WIPE_DIRS, self.root):
            if not wipe(d, (), protected) or listing(d, (), protected):
                raise Unclean(f"{d} could not be wiped")

    # ---- verdict helpers ------------------------------------------------------------
    def crash_verdict(self, run, status, stderr_text, pid=None):
        """Verdict for a program run that did not end normally; None if it ended normally."""
        if run.timed_out:
            return "TLE", f"time limit exceeded ({self.limit_s:.2f}s)"
        if run.over is not None and run.over.endswith(("stdout", "stderr")):
            return "OLE", f"output limit exceeded ({self.output_bytes} bytes)"
        if status is None or status < 0:
            return "RE", "the program ended abnormally"
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        if sig == signal.SIGXCPU:
            return "TLE", "CPU time limit exceeded"
        if "MemoryError" in stderr_text[-2000:] or "bad_alloc" in stderr_text[-2000:]:
            return "MLE", f"memory limit exceeded ({self.memory_mb} MiB)"
        if sig == signal.SIGKILL and pid in run.killed:
            return "RE", "the program broke off the test (its call channel ended)"
        if sig == signal.SIGKILL:
            return "MLE", "killed (likely out of memory)"
        if sig is not None:
            return "RE", f"killed by signal {sig}"
        code = os.WEXITSTATUS(status)
        if code != 0:
            return "RE", f"exit code {code}: {_excerpt(stderr_text.strip()[-300:])}"
        return None

    # ---- checkers ------------------------------------------------------------------
    def compare(self, inp, expected, got):
        kind = self.spec["checker"]
        if kind == "exact":
            if got == expected:
                return True, ""
            return False, self.first_diff(expected.split("\n"), got.split("\n"), "line")
        if kind == "custom":
            return self.custom_check(inp, expected, got)
        if kind == "kattis":
            return kattis_validation.compare_default(expected, got, self.spec["kattis_flags"])
        if kind == "validator":
            return kattis_validation.validate(self, self.validator, {"input": inp, "output": expected}, got)
        et, gt = expected.split(), got.split()
        if kind == "tokens":
            if et == gt:
                return True, ""
            return False, self.first_diff(et, gt, "token")
        import math

        if len(et) != len(gt):
            return False, f"expected {len(et)} tokens, got {len(gt)}"
        for i, (a, b) in enumerate(zip(et, gt, strict=False)):
            if a == b:
                continue
            try:
                fa, fb = float(a), float(b)
            except ValueError:
                return False, f"token {i + 1}: expected {_excerpt(a, 40)!r}, got {_excerpt(b, 40)!r}"
            if not math.isclose(fa, fb, rel_tol=self.spec["rel_tol"], abs_tol=self.spec["abs_tol"]):
                return False, (f"token {i + 1}: expected {a}, got {b} "
                               f"(abs_tol={self.spec['abs_tol']:g}, rel_tol={self.spec['rel_tol']:g})")
        return True, ""

    @staticmethod
    def first_diff(exp, got, unit):
        for i, (a, b) in enumerate(zip(exp, got, strict=False)):
            if a != b:
                return f"{unit} {i + 1}: expected {_excerpt(a, 60)!r}, got {_excerpt(b, 60)!r}"
        if len(exp) != len(got):
            return f"expected {len(exp)} {unit}s, got {len(got)}"
        return "outputs differ"

    def custom_check(self, inp, expected, got):
        """A dataset's checker, trusted but run as uid 65533 in its own process."""
        job = json.dumps({"checker": self.spec["checker_program"], "input": inp, "expected": expected,
                          "got": got}).encode()
        run = Run()
        limit = self.spec["checker_time_limit_s"]
        self.start(run, "checker", EVAL_UID, self.job_dir(EVAL_UID), limit, 0, stdin=job, outputs=("answer",))
        (pid,) = self.started(run)
        self.supervise(run, pid, time.monotonic() + limit)
        try:
            ans = json.loads(bytes(run.out.get("checker.answer", b"")).decode())
        except ValueError:
            ans = {"ok": False, "error": "checker produced no answer: " + _excerpt(
                bytes(run.out.get("checker.stderr", b"")).decode("utf-8", "replace")[-300:])}
        if "error" in ans:
            self.checker_errors.append(ans["error"])
            return False, "checker failed: " + ans["error"]
        return bool(ans["ok"]), str(ans.get("message", ""))

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
            return None, _excerpt(msg, 600) or "compilation failed"
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
        v = {"time_s": round(elapsed, 4), "got": _excerpt(got), "expected": _excerpt(test["output"])}
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
            v["expected"] = _excerpt(json.dumps(test["expected"]))
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
            v["got"] = _excerpt(text)
            try:
                got = json.loads(text)
            except ValueError:  # cannot happen for a whole value; a broken one fails, never passes
                v["status"], v["message"] = "RE", "the return value could not be read"
                return v
            ok = self.values_equal(got, test["expected"])
            v["status"] = "AC" if ok else "WA"
            v["message"] = "" if ok else "expected {}, got {}".format(
                _excerpt(json.dumps(test["expected"]), 60), _excerpt(text, 60))
        elif tag == b"X":
            v["got"] = _excerpt(text)
            v["status"], v["message"] = "WA", "return value is not JSON-serializable: " + _excerpt(text, 80)
        else:  # the program ended (or was killed) during the test, or the evaluator failed
            crash = self.crash_verdict(run, run.status.get(cand), stderr, cand)
            v["status"], v["message"] = crash or ("RE", "the process exited before the test finished")
        return v

    def values_equal(self, a, b):
        if self.spec["checker"] == "float" and isinstance(a, (int, float)) and isinstance(b, (int, float)) \
                and not isinstance(a, bool) and not isinstance(b, bool):
            import math

            try:
                return math.isclose(a, b, rel_tol=self.spec["rel_tol"], abs_tol=self.spec["abs_tol"])
            except OverflowError:  # an int no float can hold: only the very same int is close to it
                return a == b
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(self.values_equal(x, y) for x, y in zip(a, b, strict=False))
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(self.values_equal(a[k], b[k]) for k in a)
        return type(a) is type(b) and a == b or (
            isinstance(a, (int, float)) and isinstance(b, (int, float))
            and not isinstance(a, bool) and not isinstance(b, bool) and a == b)

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
        _NO_SUBREAPER[0] = True
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
