"""The judge's processes (see harness.py): each test's children started through the zygote with their
pipes, supervised under their limits and caps until they end, and after each test and each job every
process of the untrusted uids killed (by the executor's standing cleaners), its zombies reaped and its
files wiped. Stdlib only; runs in the harness (the sandbox's root)."""

import os
import select
import signal
import time

import limits
from common import UNTRUSTED_UIDS, WIPE_DIRS, reap, tasks, zombies_of
from sysvipc import ipc_objects
from wiping import listing, protector, wipe

# where the kernel has no subreapers (gVisor), a test's orphans go to PID 1, the executor, which reaps them
# within its REAP_TICK_S (exec_supervise.py): the harness waits that long for it, at most ORPHAN_WAIT_S
NO_SUBREAPER = [False]
ORPHAN_WAIT_S = 5.0


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



class Unclean(RuntimeError):
    """The sandbox cannot be proven clean after a job's processes: that job pays."""


class ForkFailed(RuntimeError):
    """A process of a test could not be forked (the sandbox's process table was full)."""


class Processes:
    """The harness's processes, as a part of it (class Harness): what it starts, watches and clears."""

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
        if NO_SUBREAPER[0]:
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
