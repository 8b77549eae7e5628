"""The standing cleaners: one process per untrusted uid, forked at start-up, that kills every process of
its uid at once (kill(-1)) and removes its IPC objects when asked; so cleaning up never forks, and no
program can signal or trace a cleaner. Stdlib only."""

import errno
import os
import signal
import time

from common import (
    EVAL_UID,
    PR_SET_DUMPABLE,
    RUN_UID,
    UID_BASE,
    libc,
    other_pids,
    pidfd_open,
    prctl,
    proc_identity,
    readable,
    uid_of,
)
from sysvipc import remove_ipc

# The standing cleaner of each untrusted uid runs with real and saved uid of its own (no program
# runs as these), and the untrusted uid as its effective uid only: kill(-1) then reaches exactly the
# processes of that uid (and of its own uid: itself), while no process of the untrusted uid can signal
# it, trace it or read its /proc entries (kill and ptrace check the target's real and saved uids).
CLEANER_UIDS = {RUN_UID: UID_BASE + 1, EVAL_UID: UID_BASE}


SWEEP_S = 10.0  # how long a cleaner keeps killing before it reports failure


WAIT_S = 30.0  # how long a caller waits for a cleaner's answer


def _become_cleaner(uid):
    """In a fresh child: real and saved uid CLEANER_UIDS[uid], effective uid `uid`, no capability."""
    own = CLEANER_UIDS[uid]
    os.setgroups([])
    os.setresgid(own, own, own)
    os.setresuid(own, uid, own)
    prctl(PR_SET_DUMPABLE, 0)
    if os.getresuid() != (own, uid, own) or os.getresgid() != (own, own, own):
        raise OSError("the cleaner's uid change did not hold")
    try:
        os.setuid(0)
    except OSError:
        pass
    else:
        raise OSError("the cleaner could regain uid 0")
    with open("/proc/self/status") as fh:
        caps = {k: v.strip() for k, _, v in (line.partition(":") for line in fh) if k in ("CapEff", "CapPrm")}
    if any(int(v, 16) for v in caps.values()):
        raise OSError("the cleaner still holds capabilities")


def _sweep(uid, spare):
    """Kill every process of `uid` but this one (and `spare`); then its IPC objects (unless a session
    is spared). All at once with kill(-1), so no chain of forks outruns it; with a spared session,
    SIGSTOP through kill(-1) first, so nothing forks while the others are killed one by one. The spared
    session stays stopped: between its cells nothing of it runs (the executor continues it for its next
    cell). True if none is left."""
    me = os.getpid()
    keep = {me} if spare is None else {me, spare}
    deadline = time.monotonic() + SWEEP_S
    pause = 0.0005
    ok = False
    while True:
        try:
            os.kill(-1, signal.SIGKILL if spare is None else signal.SIGSTOP)
        except OSError:
            pass
        left = [p for p in other_pids(keep) if uid_of(p) == uid]
        if spare is not None:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            left = [p for p in other_pids(keep) if uid_of(p) == uid]
        if not left:
            ok = True
            break
        if time.monotonic() > deadline:
            break
        time.sleep(pause)
        pause = min(pause * 2, 0.02)
    if spare is None:
        remove_ipc(uid)
    return ok


def _serve_cleaner(sock, uid):
    """Answer sweep requests until the socket closes: 4 bytes of nonce, the op (k: kill all, s: all but
    the spared pid that follows as an int32); the answer is the nonce and 0 (clean) or 1."""
    import struct

    while True:
        try:
            msg = sock.recv(64)
        except OSError:
            os._exit(0)
        if len(msg) != 9 or msg[4:5] not in (b"k", b"s"):
            os._exit(0)
        spare = struct.unpack("i", msg[5:9])[0] if msg[4:5] == b"s" else None
        ok = _sweep(uid, spare)
        try:
            sock.send(msg[:4] + (b"\x00" if ok else b"\x01"))
        except OSError:
            os._exit(0)


_SCHED_GETATTR = {"x86_64": 315, "aarch64": 275}


def _sched_attr(pid):
    """The whole `struct sched_attr` of a process (policy, flags, nice, priority, the custom time slice,
    deadline/period, util-clamp), as bytes; None where the kernel has no sched_getattr. A program may
    rewrite fields /proc does not show (the slice: a channel to a later job), so all of it is compared."""
    import ctypes

    nr = _SCHED_GETATTR.get(os.uname().machine)
    if nr is None:
        return None
    buf = ctypes.create_string_buffer(56)
    # the one libc handle: a fresh CDLL (a dlopen and a class built) took ~10 us of each call
    if libc().syscall(nr, ctypes.c_int(pid), buf, ctypes.c_uint(56), ctypes.c_uint(0)) != 0:
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EPERM):
            return None
        raise OSError(err, "sched_getattr of the cleaner failed")
    return buf.raw


def _sched(pid, pidfd):
    """(nice, scheduling policy, CPUs, the whole sched_attr) of a process: what a program could change
    for a cleaner; OSError once it has ended. System calls only (reading /proc/PID/stat for the first two
    was ~20 us of each call). Whether it has ended is read from its pidfd, after the rest: a process that
    has not ended by then is the one that was read (a pid is reused only after its process ended), so no
    other process that took a dead cleaner's pid passes for it."""

    before = proc_identity(pid) if pidfd is None else None
    state = (os.getpriority(os.PRIO_PROCESS, pid), os.sched_getscheduler(pid), frozenset(os.sched_getaffinity(pid)),
             _sched_attr(pid))
    if pidfd is None:  # no pidfds (gVisor): the same process, still running, before and after the reads
        after = proc_identity(pid)
        if after[0] != before[0] or after[1] in ("Z", "X"):  # its state (R, S) may change meanwhile
            raise OSError("the cleaner is dead")
        return state + (after[0],)
    if readable(pidfd, 0):  # readable: the process has ended (a zombie included)
        raise OSError("the cleaner is dead")
    return state


class Cleaner:
    """The handle on a standing cleaner: `start` forks it (call it only while no untrusted process
    exists: its memory then holds nothing a program could want, and no fork is needed later, when a
    program may have filled the process table); `sweep` kills through it."""

    def __init__(self, uid, sock, pid):
        self.uid, self.sock, self.pid = uid, sock, pid
        self.pidfd = pidfd_open(pid)  # close-on-exec; a fork server closes it (it keeps only its socket)
        self.sched = _sched(pid, self.pidfd)

    @classmethod
    def start(cls, uid):
        import socket

        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            try:
                parent.close()
                keep = child.fileno()
                os.closerange(3, keep)  # fds 0-2 stay the executor's: its sink (executor.main), never /dev/null
                os.closerange(keep + 1, 1 << 16)
                os.setsid()
                try:
                    _become_cleaner(uid)
                except BaseException as exc:  # noqa: B036 - told to the parent, which refuses to serve
                    child.send(b"E" + f"{type(exc).__name__}: {exc}".encode()[:200])
                    raise
                child.send(b"R")
                _serve_cleaner(child, uid)
            finally:
                os._exit(1)
        child.close()

        ready = readable(parent, 30)
        msg = parent.recv(256) if ready else b""
        if msg != b"R":
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            raise OSError(msg[1:].decode("utf-8", "replace") if msg[:1] == b"E" else "the cleaner did not start")
        return cls(uid, parent, pid)

    def sweep(self, spare=None):
        """Kill every process of this cleaner's uid (but `spare`). True if none is left and the cleaner
        is as it was started; False also when it does not answer within WAIT_S."""
        import struct

        nonce = os.urandom(4)
        try:
            self.sock.send(nonce + (b"k" if spare is None else b"s") + struct.pack("i", spare or 0))
        except OSError:
            return False
        deadline = time.monotonic() + WAIT_S
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not readable(self.sock, left):
                return False
            try:
                reply = self.sock.recv(64)
            except OSError:
                return False
            if not reply:
                return False
            if reply[:4] == nonce:  # else: a late answer to a caller that gave up (a killed harness)
                return reply[4:5] == b"\x00" and self.intact()

    def intact(self):
        """The cleaner lives, at the scheduling it started with (its effective uid is the untrusted one,
        so a program may lower its priority: that makes the sandbox unclean)."""
        try:
            return _sched(self.pid, self.pidfd) == self.sched
        except (OSError, ValueError, IndexError):
            return False
