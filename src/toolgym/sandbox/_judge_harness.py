"""The judge harness: runs INSIDE the sandbox, as the program of one call. Stdlib only.

Order of events: make itself non-dumpable and a child subreaper; start the zygote (a
fresh `python -I -S`, see _judge_zygote.py); only then read ``judge_spec.json`` (the
jobs: programs, tests, limits, and the per-call nonce) into memory and delete it. Each
test runs in a child forked by a zygote, under a wall-clock limit (the child's process
group, then every orphan left under the harness, is killed), RLIMIT_AS/CPU/FSIZE and an
output cap. The harness compares outputs (stdio mode) and return values (call form)
itself; in assert form it accepts only the exact "loaded, passed+token" message sequence
and a clean exit. Verdicts go to the harness's own stdout, which no child shares, one
JSON line per test prefixed by the nonce, then a done line per job and an all_done line.

Jobs of one call run `concurrency` at a time (one thread and one zygote each). A verdict
that running side by side could have caused (a time-out, a kill by a signal we did not
send, an orphan of unknown origin) drops that job without a done line; the host then
judges it again alone. See toolgym/sandbox/judge.py for the threat model.

This file is sent as source to the sandbox; it must not import toolgym.
"""

import json
import os
import select
import signal
import sys
import time

SPEC_FILE = "judge_spec.json"
ZYGOTE_FILE = "judge_zygote.py"
EXCERPT = 160
NOBODY = 65534
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36

def _excerpt(text, limit=EXCERPT):
    if text is None:
        return None
    return text if len(text) <= limit else text[:limit] + "..."


class Harness:
    def __init__(self, nonce, libc=None, zygote=None, lock=None):
        import threading

        self.spec = None
        self.nonce = nonce
        self.zygote = zygote
        self.zsock = zygote.sock if zygote is not None else None
        self.zygote_pids = {zygote.pid} if zygote is not None else set()
        self.concurrent = False
        self.lock = lock or threading.Lock()
        self.pid = os.getpid()
        self.drop_uid = os.geteuid() == 0
        self.libc = libc

    # ---- output channel ------------------------------------------------------------
    def emit(self, obj):
        line = self.nonce + " " + json.dumps(obj) + "\n"
        data = line.encode()
        with self.lock:
            while data:
                data = data[os.write(1, data):]

    # ---- process plumbing ----------------------------------------------------------
    def children(self, pid):
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                return [int(x) for x in f.read().split()]
        except OSError:
            return []

    def sweep(self):
        """Kill and reap every process left under the harness (a subreaper) but the zygote."""
        for _ in range(50):
            kids = [k for k in self.children(self.pid) if k not in self.zygote_pids]
            if not kids:
                return
            for k in kids:
                try:
                    os.kill(k, signal.SIGKILL)
                except OSError:
                    pass
            for k in kids:
                try:
                    os.waitpid(k, 0)
                except OSError:
                    pass

    def lone(self, pid):
        """True if `pid` runs one thread and no process but it exists under the harness."""
        try:
            if len(os.listdir(f"/proc/{pid}/task")) != 1:
                return False
        except OSError:
            return False
        if self.children(pid) or self.children(self.zygote.pid) != [pid]:
            return False
        if any(k not in self.zygote_pids for k in self.children(self.pid)):
            # an orphan under the harness: whose, when jobs run side by side, is unknown
            return AMBIGUOUS if self.concurrent else False
        return True

    def make_dir(self):
        d = os.path.join(self.rundir, "t" + os.urandom(6).hex())
        os.mkdir(d, 0o700)
        if self.drop_uid:
            os.chown(d, NOBODY, NOBODY)
        return d

    def zygote_send(self, req, fds):
        import socket

        socket.send_fds(self.zsock, [json.dumps(req).encode()], fds)

    def zygote_recv(self):
        msg = self.zsock.recv(65536)
        if not msg:
            raise RuntimeError("the judge zygote died")
        return json.loads(msg)

    def run_child(self, kind, cwd, stdin_data=None, program_msg=None, on_message=None, limit_s=2.0,
                  memory_mb=256, output_bytes=1 << 20, path=None, argv=None, answer_fd=False):
        """Run one child (forked by the zygote) under all limits; describe what happened."""
        ctl_r = ctl_w = res_r = res_w = None
        in_r, in_w = os.pipe() if stdin_data is not None else (os.open(os.devnull, os.O_RDONLY), None)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        fds = [in_r, out_w, err_w]
        if program_msg is not None:
            ctl_r, ctl_w = os.pipe()
            res_r, res_w = os.pipe()
            fds += [ctl_r, res_w]
        elif answer_fd:
            res_r, res_w = os.pipe()
            fds += [res_w]
        req = {"kind": kind, "cwd": cwd, "mem": memory_mb << 20 if memory_mb else 0, "cpu": int(limit_s) + 1,
               "fsize": self.spec.get("file_bytes", 16 << 20), "drop_uid": self.drop_uid, "path": path,
               "argv": argv}
        out = {"stdout": bytearray(), "stderr": bytearray(), "res": bytearray(), "messages": [],
               "timed_out": False, "ole": False, "violation": None, "status": None, "killed_by_us": False}
        reads = {out_r: "stdout", err_r: "stderr"}
        if res_r is not None:
            reads[res_r] = "res"
        writes = {}
        if in_w is not None:
            writes[in_w] = bytearray(stdin_data)
        if ctl_w is not None:
            writes[ctl_w] = bytearray(program_msg)
        for fd in list(reads) + list(writes):
            os.set_blocking(fd, False)
        for fd, buf in writes.items():  # pre-fill the pipes: the child need not wait for us
            try:
                del buf[:os.write(fd, buf[:65536])]
            except BlockingIOError:
                pass
        start = time.monotonic()
        self.zygote_send(req, fds)
        for fd in fds:
            os.close(fd)
        pid = self.zygote_recv()["pid"]
        poller = select.poll()
        for fd in reads:
            poller.register(fd, select.POLLIN)
        for fd in writes:
            poller.register(fd, select.POLLOUT)
        zfd = self.zsock.fileno()
        poller.register(zfd, select.POLLIN)
        deadline = start + limit_s
        drain_until = None
        exit_status = None
        end = None

        def kill():
            out["killed_by_us"] = True
            for f in (os.killpg, os.kill):
                try:
                    f(pid, signal.SIGKILL)
                except OSError:
                    pass

        def stop_writing(fd):
            try:
                poller.unregister(fd)
            except (KeyError, ValueError):
                pass
            writes.pop(fd, None)
            if fd == in_w:
                os.close(fd)

        while True:
            now = time.monotonic()
            if exit_status is not None:
                if not reads or now >= drain_until:
                    break
            elif now >= deadline:
                out["timed_out"] = True
                break
            if out["ole"] or out["violation"]:
                break
            wait = (drain_until if exit_status is not None else deadline) - now
            for fd, _ev in poller.poll(max(0.0, wait) * 1000):
                if fd == zfd:
                    exit_status = self.zygote_recv()["exit"]
                    end = time.monotonic()
                    drain_until = end + 0.25
                    poller.unregister(zfd)
                elif fd in writes:
                    buf = writes[fd]
                    try:
                        n = os.write(fd, buf[:65536])
                        del buf[:n]
                    except BlockingIOError:
                        continue
                    except OSError:
                        stop_writing(fd)
                        continue
                    if not buf:
                        stop_writing(fd)
                elif fd in reads:
                    name = reads[fd]
                    try:
                        chunk = os.read(fd, 65536)
                    except BlockingIOError:
                        continue
                    except OSError:
                        chunk = b""
                    if not chunk:
                        poller.unregister(fd)
                        del reads[fd]
                        continue
                    buf = out[name]
                    buf += chunk
                    if len(buf) > (output_bytes if name != "res" else output_bytes + (1 << 16)):
                        out["ole"] = True
                    if name == "res" and program_msg is not None:
                        while len(buf) >= 5:
                            n = int.from_bytes(buf[1:5], "big")
                            if len(buf) < 5 + n:
                                break
                            tag, payload = bytes(buf[:1]), bytes(buf[5:5 + n])
                            del buf[:5 + n]
                            out["messages"].append((tag, payload))
                            reply = on_message(tag, payload, pid, out) if on_message else None
                            if reply is not None and ctl_w is not None:
                                writes[ctl_w] = bytearray(reply)
                                poller.register(ctl_w, select.POLLOUT)
        if exit_status is None:
            kill()
            exit_status = self.zygote_recv()["exit"]
            end = time.monotonic()
        else:
            try:
                os.killpg(pid, signal.SIGKILL)  # whatever is left of its process group
            except OSError:
                pass
        self.sweep()
        for fd in list(reads) + list(writes) + [x for x in (ctl_w,) if x is not None]:
            try:
                os.close(fd)
            except OSError:
                pass
        out["status"] = exit_status
        out["time_s"] = round(end - start, 4)
        return out

    # ---- verdict helpers ------------------------------------------------------------
    @staticmethod
    def signal_of(status):
        return os.WTERMSIG(status) if os.WIFSIGNALED(status) else None

    def crash_verdict(self, r, stderr_text):
        """Verdict for a run that did not end normally; None if it ended normally."""
        if r["timed_out"]:
            r["contended"] = True
            return "TLE", f"time limit exceeded ({self.limit_s:.2f}s)"
        if r["ole"]:
            return "OLE", f"output limit exceeded ({self.output_bytes} bytes)"
        sig = self.signal_of(r["status"])
        if sig == signal.SIGXCPU:
            r["contended"] = True
            return "TLE", "CPU time limit exceeded"
        if "MemoryError" in stderr_text[-2000:] or "bad_alloc" in stderr_text[-2000:]:
            return "MLE", f"memory limit exceeded ({self.memory_mb} MiB)"
        if sig == signal.SIGKILL and not r["killed_by_us"]:
            r["contended"] = True
            return "MLE", "killed (likely out of memory)"
        if sig is not None:
            r["contended"] = not r["killed_by_us"]  # another job of the call may have sent it
            return "RE", f"killed by signal {sig}"
        code = os.WEXITSTATUS(r["status"])
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
        et, gt = expected.split(), got.split()
        if kind == "tokens":
            if et == gt:
                return True, ""
            return False, self.first_diff(et, gt, "token")
        # float
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
        job = json.dumps({"checker": self.spec["checker_program"], "input": inp, "expected": expected,
                          "got": got}).encode()
        d = self.make_dir()
        r = self.run_child("checker", d, stdin_data=job, limit_s=self.spec.get("checker_time_limit_s", 10.0),
                           memory_mb=0, output_bytes=1 << 20, answer_fd=True)
        self.rmdir(d)
        try:
            ans = json.loads(bytes(r["res"]).decode())
        except ValueError:
            ans = {"ok": False, "error": "checker produced no answer: " + _excerpt(
                bytes(r["stderr"]).decode("utf-8", "replace")[-300:])}
        if "error" in ans:
            self.checker_errors.append(ans["error"])
            return False, "checker failed: " + ans["error"]
        return ans["ok"], ans.get("message", "")

    def rmdir(self, d):
        for root, dirs, files in os.walk(d, topdown=False):
            for name in files:
                try:
                    os.unlink(os.path.join(root, name))
                except OSError:
                    pass
            for name in dirs:
                p = os.path.join(root, name)
                try:
                    os.rmdir(p) if not os.path.islink(p) else os.unlink(p)
                except OSError:
                    pass
        try:
            os.rmdir(d)
        except OSError:
            pass

    # ---- modes -----------------------------------------------------------------------
    def prepare(self):
        """Write/compile the program for stdio mode. Returns an argv, or a CE message."""
        lang = self.spec["language"]
        prog = self.spec["program"]
        if self.spec["mode"] == "function":
            return ("boot", None), None
        if lang == "python":
            path = os.path.join(self.rundir, "main.py")
            with open(path, "w", encoding="utf-8") as f:
                f.write(prog)
            os.chmod(path, 0o644)
            return ("py", path), None
        if lang == "cpp":
            import subprocess

            src = os.path.join(self.rundir, "main.cpp")
            exe = os.path.join(self.rundir, "main")
            with open(src, "w", encoding="utf-8") as f:
                f.write(prog)
            try:
                cp = subprocess.run(["g++", "-O2", "-std=c++17", "-o", exe, src], capture_output=True,
                                    timeout=self.spec.get("compile_time_limit_s", 30.0), cwd=self.rundir)
            except subprocess.TimeoutExpired:
                return None, "compilation timed out"
            except FileNotFoundError:
                return None, "g++ is not installed in this sandbox"
            if cp.returncode != 0:
                msg = cp.stderr.decode("utf-8", "replace").replace(self.rundir + "/", "").strip()
                return None, _excerpt(msg, 600)
            os.chmod(exe, 0o755)
            return ("exec", exe), None
        raise ValueError("unsupported language " + lang)

    def run_stdio(self, how, test):
        d = self.make_dir()
        kind, target = how
        r = self.run_child(kind, d, path=target, argv=[target], stdin_data=test["input"].encode("utf-8"), limit_s=self.limit_s,
                           memory_mb=self.memory_mb, output_bytes=self.output_bytes)
        self.rmdir(d)
        stderr = bytes(r["stderr"]).decode("utf-8", "replace")
        got = bytes(r["stdout"]).decode("utf-8", "replace")
        crash = self.crash_verdict(r, stderr)
        v = {"time_s": r["time_s"], "got": _excerpt(got), "expected": _excerpt(test["output"])}
        if crash is not None:
            v["status"], v["message"] = crash
            v["contended"] = r.get("contended", False)
            return v
        ok, msg = self.compare(test["input"], test["output"], got)
        v["status"], v["message"] = ("AC", "") if ok else ("WA", msg)
        return v

    def run_function(self, how, test):
        token = os.urandom(16).hex().encode()
        body = json.dumps(test).encode()
        state = {}

        def on_message(tag, payload, pid, out):
            if tag == b"L" and "loaded" not in state:
                state["loaded"] = True
                lone = self.lone(pid)
                if lone is not True:
                    out["violation"] = lone or "the program left threads or processes running after it loaded"
                    return None
                msg = token + body
                return b"T" + len(msg).to_bytes(4, "big") + msg
            return None

        prog = self.spec["program"].encode("utf-8")
        d = self.rundir  # nothing of the job lives there: the program arrives over a pipe
        r = self.run_child("boot", d, program_msg=b"P" + len(prog).to_bytes(4, "big") + prog,
                           on_message=on_message, limit_s=self.limit_s, memory_mb=self.memory_mb,
                           output_bytes=self.output_bytes)
        stderr = bytes(r["stderr"]).decode("utf-8", "replace")
        v = {"time_s": r["time_s"], "got": None, "expected": None}
        if "expected" in test:
            v["expected"] = _excerpt(json.dumps(test["expected"]))
        msgs = r["messages"]
        tags = [t for t, _ in msgs]
        if r["violation"] == AMBIGUOUS:
            raise Abandon()
        if r["violation"]:
            v["status"], v["message"] = "RE", r["violation"]
            return v
        normal_exit = os.WIFEXITED(r["status"]) and os.WEXITSTATUS(r["status"]) == 0
        if not (r["timed_out"] or r["ole"]):
            if normal_exit and tags == [b"L", b"A"] and msgs[1][1] == token:
                v["status"], v["message"] = "AC", ""
                return v
            if normal_exit and tags == [b"L", b"V"] and msgs[1][1][:32] == token:
                val = msgs[1][1]
                kind, text = val[32:33], val[33:].decode("utf-8", "replace")
                v["got"] = _excerpt(text)
                if kind != b"J":
                    v["status"], v["message"] = "WA", "return value is not JSON-serializable: " + _excerpt(text, 80)
                    return v
                ok = self.values_equal(json.loads(text), test["expected"])
                v["status"] = "AC" if ok else "WA"
                v["message"] = "" if ok else "expected {}, got {}".format(_excerpt(json.dumps(test["expected"]), 60),
                                                                     _excerpt(text, 60))
                return v
            first = next(((t, p) for t, p in msgs if t != b"L"), None)
            if first is not None and first[0] == b"M":
                v["status"], v["message"] = "MLE", f"memory limit exceeded ({self.memory_mb} MiB)"
                return v
            if first is not None and first[0] == b"E":
                v["status"], v["message"] = "RE", "program failed to load: " + first[1].decode("utf-8", "replace")
                return v
            if first is not None and first[0] == b"F":
                f = first[1]
                v["status"] = "WA" if f[:1] == b"W" else "RE"
                v["message"] = f[1:].decode("utf-8", "replace") or "assertion failed"
                return v
        crash = self.crash_verdict(r, stderr)
        if crash is not None:
            v["status"], v["message"] = crash
            v["contended"] = r.get("contended", False)
            return v
        v["status"], v["message"] = "RE", "the process exited before the test finished"
        return v

    def values_equal(self, a, b):
        if self.spec["checker"] == "float" and isinstance(a, (int, float)) and isinstance(b, (int, float)) \
                and not isinstance(a, bool) and not isinstance(b, bool):
            import math

            return math.isclose(a, b, rel_tol=self.spec["rel_tol"], abs_tol=self.spec["abs_tol"])
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(self.values_equal(x, y) for x, y in zip(a, b, strict=False))
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(self.values_equal(a[k], b[k]) for k in a)
        return type(a) is type(b) and a == b or (
            isinstance(a, (int, float)) and isinstance(b, (int, float))
            and not isinstance(a, bool) and not isinstance(b, bool) and a == b)

    def run_job(self, j, job):
        """Judge one submission: emit one line per test, then a done line."""
        self.spec = job
        self.limit_s = float(job["time_limit_s"])
        self.memory_mb = int(job["memory_mb"])
        self.output_bytes = int(job["output_bytes"])
        self.checker_errors = []
        start = time.monotonic()
        self.rundir = os.path.join(self.root, f"j{j}")
        os.mkdir(self.rundir, 0o711)
        try:
            how, ce = self.prepare()
            stop = bool(job["stop_at_first_failure"])
            failed = False
            for i, test in enumerate(job["tests"]):
                if ce is not None:
                    v = {"status": "CE", "message": ce, "time_s": 0.0, "got": None, "expected": None}
                elif failed and stop:
                    v = {"status": "SKIPPED", "message": "skipped after an earlier failure", "time_s": 0.0,
                         "got": None, "expected": None}
                elif job["mode"] == "stdio":
                    v = self.run_stdio(how, test)
                else:
                    v = self.run_function(how, test)
                if self.concurrent and v.pop("contended", False):
                    raise Abandon()
                v.pop("contended", None)
                v["j"], v["i"] = j, i
                failed = failed or v["status"] != "AC"
                self.emit(v)
        except Abandon:
            # Running side by side with other jobs made this verdict uncertain (a time-out,
            # an out-of-memory kill, an orphan of unknown origin): no done line, so the host
            # judges this job again on its own.
            return
        finally:
            self.rmdir(self.rundir)
        self.emit({"done": True, "j": j, "elapsed_s": round(time.monotonic() - start, 4),
                   "checker_errors": self.checker_errors[:3]})

AMBIGUOUS = "ambiguous"


class Abandon(Exception):
    """This job's verdict cannot be trusted while other jobs ran beside it."""


def load_spec(path=SPEC_FILE):
    """Read the spec into memory and delete it from disk before anything else runs."""
    with open(path, "rb") as f:
        data = f.read()
    os.unlink(path)
    return json.loads(data)


def _libc():
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True)
    except Exception:
        return None


class Zygote:
    """Start the zygote (a fresh `python -I -S`, so none of our memory) before any secret is read."""

    def __init__(self):
        import socket

        here = os.path.dirname(os.path.abspath(__file__)) if "__file__" in globals() else "."
        path = next((p for p in (ZYGOTE_FILE, os.path.join(here, ZYGOTE_FILE), os.path.join(here, "_" + ZYGOTE_FILE))
                     if os.path.exists(p)), None)
        if path is None:
            raise RuntimeError(f"judge zygote source {ZYGOTE_FILE} not found")
        with open(path, "rb") as f:
            source = f.read().decode("utf-8")
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        argv = [sys.executable, "-I", "-S", "-c", source, str(child.fileno()), json.dumps(sys.path)]
        pid = os.fork()
        if pid == 0:  # exec at once: nothing of ours survives
            try:
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                keep = child.fileno()
                os.closerange(3, keep)
                os.closerange(keep + 1, 1 << 16)
                os.set_inheritable(keep, True)
                os.execv(sys.executable, argv)
            finally:
                os._exit(127)
        child.close()
        self.pid, self.sock = pid, parent


def run_all(nonce, libc, zygotes, jobs):
    """Judge `jobs`, len(zygotes) at a time (one thread and zygote each), then say all_done."""
    import tempfile
    import threading

    lock = threading.Lock()
    runners = [Harness(nonce, libc, z, lock) for z in zygotes]
    pids = {z.pid for z in zygotes}
    if runners[0].drop_uid:
        os.chmod(".", 0o711)  # a root harness runs tests as nobody, who must traverse this
    # In the call's work dir: binaries may run there (/tmp can be noexec).
    root = tempfile.mkdtemp(prefix="tgjudge-", dir=os.getcwd())
    os.chmod(root, 0o711)
    todo = list(enumerate(jobs))
    todo.reverse()

    def work(h):
        if h.zygote_recv().get("ready") is not True:
            raise RuntimeError("the judge zygote did not start")
        while True:
            with lock:
                if not todo:
                    return
                j, job = todo.pop()
            h.run_job(j, job)

    for h in runners:
        h.root, h.zygote_pids, h.concurrent = root, pids, len(runners) > 1
    try:
        if len(runners) == 1:
            work(runners[0])
        else:
            threads = [threading.Thread(target=work, args=(h,), daemon=True) for h in runners]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    finally:
        runners[0].rmdir(root)
    runners[0].emit({"all_done": True})


def main():
    libc = _libc()
    if libc is not None:
        # Non-dumpable: /proc/<harness>/mem, environ and fd are closed to same-uid processes.
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        # Subreaper: orphans of a test (double-forked daemons) become ours, to be killed.
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    zygotes = [Zygote()]
    spec = load_spec(sys.argv[1] if len(sys.argv) > 1 else SPEC_FILE)
    jobs = spec["jobs"]
    width = max(1, min(int(spec.get("concurrency") or 1), len(jobs)))
    try:
        while len(zygotes) < width:
            zygotes.append(Zygote())  # fork + exec at once: no memory of ours survives
        run_all(spec["nonce"], libc, zygotes, jobs)
    finally:
        for z in zygotes:
            z.sock.close()
            try:
                os.kill(z.pid, signal.SIGKILL)
                os.waitpid(z.pid, 0)
            except OSError:
                pass


if __name__ == "__main__":
    main()
