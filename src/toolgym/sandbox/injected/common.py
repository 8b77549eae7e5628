"""Process and file clean-up shared by the scripts injected into a sandbox. Stdlib only.

Prepended to the executor's and the judge harness's source (see `sandbox/scripts.py`), so
each of them runs as one self-contained `python -c` program.
"""

import errno
import os
import signal
import sys
import time

# Each sandbox runs its programs under uids of its own (the host passes TG_UID_BASE; 65531 gives the
# classic 65531-65534): the host kernel's per-uid counts (inotify instances, message-queue bytes, pipe
# pages, processes) are then never shared by two sandboxes (red team round 5, x04: a count shared by
# sandboxes judging at the same time carried an answer from a solver to a copier).
UID_BASE = int(os.environ.get("TG_UID_BASE") or 65531)
RUN_UID = UID_BASE + 3  # untrusted code
EVAL_UID = UID_BASE + 2  # the judge's trusted evaluator and checkers (never the submission)
UNTRUSTED_UIDS = (RUN_UID, EVAL_UID)
PR_GET_DUMPABLE, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 3, 4, 36, 38
PR_GET_NO_NEW_PRIVS = 39
PR_SET_PDEATHSIG = 1
IPC_RMID = 0
WIPE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue")
# the sandbox's pids cgroup: Docker (cgroup v1, v2), and the local backend's bind mounts
PIDS_FILES = ("/sys/fs/cgroup/pids/pids.current", "/sys/fs/cgroup/pids.current",
              "/sys/fs/cgroup/memory/pids.current")
_LIBC = []


def libc():
    if not _LIBC:
        import ctypes

        _LIBC.append(ctypes.CDLL(None, use_errno=True))
    return _LIBC[0]


def prctl(option, value):
    """prctl(option, value); raises OSError when the kernel refuses (fail closed)."""
    import ctypes

    rc = libc().prctl(option, ctypes.c_ulong(value), 0, 0, 0)
    if rc < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}) failed: {os.strerror(err)}")
    return rc


# (audit arch, mq_open, clone3) of each architecture, for `gvisor_filter`
_GVISOR_NRS = {"x86_64": (0xC000003E, 240, 435), "aarch64": (0xC00000B7, 180, 435)}
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2


def gvisor_filter():
    """Install a seccomp filter (on top of the sandbox's) under which mq_open and clone3 fail with ENOSYS,
    for this process and all it forks. Under gVisor: the sandbox cannot list its POSIX message queues
    (gVisor mounts no /dev/mqueue, and a queue is named only by its maker), so none may be made, or one
    would outlive the call that made it; and Docker's profile as gVisor applies it answers clone3 with
    EPERM, not ENOSYS, so glibc never falls back to clone and no thread starts (of a program or ours);
    for the same errno action the newest filter's value wins. Needs no_new_privs; raises OSError when the
    kernel refuses the filter."""
    import ctypes
    import struct

    arch, mq_open, clone3 = _GVISOR_NRS[os.uname().machine]
    ld, jeq, ret = 0x20, 0x15, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_RET|BPF_K
    prog = [(ld, 0, 0, 4), (jeq, 0, 3, arch), (ld, 0, 0, 0), (jeq, 2, 0, mq_open), (jeq, 1, 0, clone3),
            (ret, 0, 0, 0x7FFF0000), (ret, 0, 0, 0x00050000 | errno.ENOSYS)]
    code = b"".join(struct.pack("HBBI", *ins) for ins in prog)
    buf = ctypes.create_string_buffer(code, len(code))

    class FProg(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = FProg(len(prog), ctypes.cast(buf, ctypes.c_void_p))
    if libc().prctl(PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"the gVisor filter was refused: {os.strerror(err)}")


def scrub_environ():
    """Zero this process's initial environment strings in its memory (Python keeps its own copy in
    os.environ). Under gVisor /proc/PID/environ is readable by every uid (mode 0444, whatever the process's
    dumpability; Linux: 0400 and root's for a non-dumpable one): what it shows of the executor is then
    zeros, not its variables."""
    import ctypes

    envp = ctypes.POINTER(ctypes.c_void_p).in_dll(libc(), "environ")
    i = 0
    while envp[i]:
        addr = envp[i]
        ctypes.memset(addr, 0, len(ctypes.string_at(addr)))
        i += 1


def sink(directory):
    """A read-write fd of an empty file only root may open, named nowhere (made in `directory`, unlinked):
    what the executor holds as fds 0, 1 and 2 where /dev/null would do. Under gVisor any uid may reopen
    what /proc/1/fd/N names (its permission check is the file's own, not the executor's dumpability): a
    /dev/null there opens for anyone; this file does not."""
    path = os.path.join(directory, ".toolgym-sink-" + os.urandom(6).hex())
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.fchown(fd, 0, 0)
        os.unlink(path)
    except OSError:
        os.close(fd)
        raise
    return fd


def pidfd_open(pid):
    """A pidfd for `pid`, or None where the kernel has no pidfd_open (gVisor's): callers then tell a
    process by its pid and start time (`proc_identity`)."""
    try:
        return os.pidfd_open(pid)
    except OSError as exc:
        if exc.errno == errno.ENOSYS:
            return None
        raise


def readable(fd, timeout):
    """Whether `fd` (or a socket) is readable within `timeout` s. poll, never select: under gVisor with
    Docker's seccomp profile, select(2) is refused (EPERM)."""
    import select

    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(max(0, int(timeout * 1000 + 0.999))))


def proc_identity(pid):
    """(start time, state) of a process from /proc; OSError once it is gone. A pid is reused only with
    another start time, so the pair tells one process from a later one where no pidfd exists."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return fields[19], fields[0]


def drop_to(uid):
    """Become `uid` for good; raise if any step does not hold."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    if os.getuid() != uid or os.geteuid() != uid or os.getgid() != uid:
        raise OSError("uid drop did not hold")
    try:
        os.setuid(0)
    except OSError:
        return
    raise OSError("uid 0 could be regained")


def uid_of(pid):
    """The real uid of a live process (None for a zombie or a process that is gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("State:") and line.split()[1] in ("Z", "X"):
                    return None
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def zombies_of(uids):
    """Pids of the zombies whose real uid is one of `uids`: processes that ended and wait for their parent.
    /proc lists them to any uid, so until they are reaped they tell a later program that something ran."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as fh:
                fields = dict(line.split(":", 1) for line in fh if line.startswith(("State:", "Uid:")))
            if fields["State"].split()[0] in ("Z", "X") and int(fields["Uid"].split()[0]) in uids:
                found.append(int(name))
        except (OSError, ValueError, KeyError, IndexError):
            continue
    return found


def other_pids(keep):
    me = os.getpid()
    return [int(n) for n in os.listdir("/proc") if n.isdigit() and int(n) != me and int(n) not in keep]


def live(pid):
    """True unless the process is gone or a zombie (which runs nothing: its parent has yet to reap it,
    e.g. a child of a live session's interpreter)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def tasks():
    """Tasks in this sandbox's pids cgroup, or None where the count cannot be read."""
    for path in PIDS_FILES:
        try:
            with open(path) as fh:
                return int(fh.read())
        except (OSError, ValueError):
            continue
    return None


def ipc_objects(uid=None):
    """(kind, id) of the SysV IPC objects in this IPC namespace (if `uid` is given: those it owns OR
    created; an owner may hand an object to any uid with IPC_SET, root included, but its creator stays,
    and the creator may still remove it). Read from /proc/sysvipc; where there is none (gVisor), found
    by id (`_ipc_scan`)."""
    if not os.path.isdir("/proc/sysvipc"):
        return _ipc_scan(uid)
    out = []
    for kind, uid_col, cuid_col in (("shm", 7, 9), ("msg", 7, 9), ("sem", 4, 6)):
        try:
            with open(f"/proc/sysvipc/{kind}") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            try:
                if uid is None or int(cols[uid_col]) == uid or int(cols[cuid_col]) == uid:
                    out.append((kind, int(cols[1])))
            except (IndexError, ValueError):
                continue
    return out


# gVisor has no /proc/sysvipc and no working *_STAT/*_INFO, but it hands out the ids of each kind in
# increasing order (the last one used plus one, wrapping only at 2^31): an object made now gets an id
# above every object that exists. So every object made since the namespace was last seen empty has an
# id between that point (the floor) and a probe object's, and each id there is asked with IPC_STAT
# (EINVAL: none; anything else: one exists). The floor is kept per process, and for root's processes (the
# executor, the judge harness) in a root-only file, so a scan covers only the ids made since the last one.
IPC_CREAT, IPC_SET, IPC_STAT = 0o1000, 1, 2
IPC_KINDS = ("shm", "msg", "sem")
IPC_FLOOR_FILE = "/dev/.toolgym-ipc-floor"
_IPC_FLOOR = {}


def _ipc_call(kind, op, ident, buf=None):
    """shmctl/msgctl/semctl(ident, op, buf): 0 or the errno."""
    import ctypes

    c = libc()
    if kind == "shm":
        rc = c.shmctl(ident, op, buf)
    elif kind == "msg":
        rc = c.msgctl(ident, op, buf)
    else:
        rc = c.semctl(ident, 0, op, buf)
    return 0 if rc >= 0 else ctypes.get_errno()


def _ipc_probe(kind):
    """The id an object of `kind` made now gets (one is made and removed); None when none can be made."""
    c = libc()
    if kind == "shm":
        ident = c.shmget(0, 1, IPC_CREAT | 0o600)
    elif kind == "msg":
        ident = c.msgget(0, IPC_CREAT | 0o600)
    else:
        ident = c.semget(0, 1, IPC_CREAT | 0o600)
    if ident < 0:
        return None
    _ipc_call(kind, IPC_RMID, ident)
    return ident


def _ipc_floors():
    if not _IPC_FLOOR:
        _IPC_FLOOR.update(dict.fromkeys(IPC_KINDS, 0))
        if os.geteuid() == 0:
            try:
                with open(IPC_FLOOR_FILE) as fh:
                    values = [int(x) for x in fh.read().split()]
                if len(values) == len(IPC_KINDS):
                    _IPC_FLOOR.update({k: values[i] for i, k in enumerate(IPC_KINDS)})
            except (OSError, ValueError):
                pass
    return _IPC_FLOOR


def _ipc_raise_floor(kind, top):
    floors = _ipc_floors()
    if top <= floors[kind]:
        return
    floors[kind] = top
    if os.geteuid() == 0:
        try:
            fd = os.open(IPC_FLOOR_FILE + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(" ".join(str(floors[k]) for k in IPC_KINDS))
            os.replace(IPC_FLOOR_FILE + ".new", IPC_FLOOR_FILE)
        except OSError:
            pass  # the next scan starts lower: slower, not wrong


def _ipc_scan(uid=None, remove=False):
    """ipc_objects where there is no /proc/sysvipc (see above); with `remove`, each object found is
    removed first where this process may (its owner or creator). A kind whose table is full cannot be
    probed: it is reported as (kind, -1), so the sandbox is never taken for clean."""
    import ctypes

    buf = ctypes.create_string_buffer(512)
    out = []
    for kind in IPC_KINDS:
        top = _ipc_probe(kind)
        if top is None:
            out.append((kind, -1))
            continue
        found = False
        for ident in range(_ipc_floors()[kind] + 1, top):
            if remove:
                _ipc_call(kind, IPC_RMID, ident)
            err = _ipc_call(kind, IPC_STAT, ident, buf)
            if err in (errno.EINVAL, errno.EIDRM):
                continue
            found = True
            # struct ipc_perm: key, uid, gid, cuid: the owner and the creator; unreadable: anyone's
            owners = (ctypes.c_uint32.from_buffer(buf, 4).value, ctypes.c_uint32.from_buffer(buf, 12).value)
            if uid is None or err or uid in owners:
                out.append((kind, ident))
        if not found:
            _ipc_raise_floor(kind, top)
    return out


# the sandbox's memory cgroup: its count of OOM kills (Docker: cgroup v1, v2; the local backend sets
# its own file, see executor.py --oom-file, and hands it to the judge harness in TG_OOM_FILE)
OOM_FILES = ["/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events"]


def oom_count():
    """OOM kills in this sandbox's memory cgroup so far (0 where no count can be read)."""
    for path in OOM_FILES:
        try:
            with open(path) as fh:
                for line in fh:
                    key, _, val = line.partition(" ")
                    if key == "oom_kill":
                        return int(val)
        except (OSError, ValueError):
            continue
    return 0


def remove_ipc(uid):
    if not os.path.isdir("/proc/sysvipc"):
        _ipc_scan(uid, remove=True)
        return
    for kind, ident in ipc_objects(uid):
        _ipc_call(kind, IPC_RMID, ident)


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


def wipe(path, spare=(), protected=lambda path: False):
    """Empty the directory `path` (not removing it) through directory descriptors: no path
    grows with the depth, no symlink is followed, a dir made unreadable is made readable
    first, and every step back up checks it returns to the dir it came from (a live
    process could move dirs around). Top-level names in `spare`, and `protected` paths,
    stay. True if everything else is gone."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError:
        return True  # no such place in this sandbox
    chain = []  # (name, (dev, ino) of its parent) for every dir we are inside, below `path`
    clean = True
    stuck = set()  # (depth, name) that could not be removed
    try:
        while True:
            subdir = None
            with os.scandir(fd) as it:
                for e in it:
                    if not chain and (e.name in spare or protected(os.path.join(path, e.name))):
                        continue
                    if (len(chain), e.name) in stuck:
                        continue
                    try:
                        if e.is_dir(follow_symlinks=False):
                            try:
                                os.rmdir(e.name, dir_fd=fd)
                            except OSError:
                                subdir = e.name
                                break
                        else:
                            os.unlink(e.name, dir_fd=fd)
                    except OSError:
                        stuck.add((len(chain), e.name))
                        clean = False
            if subdir is not None:
                try:  # through an O_PATH descriptor: never a symlink put in its place
                    pfd = os.open(subdir, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY, dir_fd=fd)
                    try:
                        os.chmod(f"/proc/self/fd/{pfd}", 0o700)
                    finally:
                        os.close(pfd)
                except OSError:
                    pass
                try:
                    child = os.open(subdir, flags, dir_fd=fd)
                except OSError:
                    stuck.add((len(chain), subdir))
                    clean = False
                    continue
                st = os.fstat(fd)
                os.close(fd)
                fd = child
                chain.append((subdir, (st.st_dev, st.st_ino)))
                continue
            if not chain:
                return clean
            name, parent_id = chain.pop()
            parent = os.open("..", flags, dir_fd=fd)
            os.close(fd)
            fd = parent
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != parent_id:
                return False  # moved under us: stop; the caller reports the sandbox unclean
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError:
                stuck.add((len(chain), name))
                clean = False
    finally:
        os.close(fd)


def protector(workroot):
    """What a wipe must leave: the work root itself, and the interpreter's read-only prefix where
    it is re-exposed under a wiped dir (an interpreter living under /tmp, e.g. a CI clone)."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)} | {
        sys.prefix, sys.base_prefix, sys.exec_prefix}

    def protected(path):
        return path == workroot or any(p == path or p.startswith(path + "/") for p in prefixes)

    return protected


def listing(path, spare=(), protected=lambda path: False):
    try:
        return [n for n in os.listdir(path) if n not in spare and not protected(os.path.join(path, n))]
    except OSError:
        return []


def reap():
    """Collect dead children and orphans (PID 1 and subreapers inherit them). {pid: status}."""
    done = {}
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        done[pid] = status
    return done


def exit_code(exc):
    """The status `python` exits with for SystemExit `exc` (printing a non-int code)."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        sys.stderr.write(str(code) + "\n")
    except Exception:
        pass
    return 1


def flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def print_exc(exc):
    """A traceback as the interpreter prints it, without the frames of these scripts."""
    import traceback  # preloaded by the scripts: no allocation-heavy import after a MemoryError

    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith("<sandbox"):
        tb = tb.tb_next
    sys.stderr.write("".join(traceback.TracebackException(type(exc), exc, tb).format()))


def forget_scripts():
    """Take these scripts' modules (common, frames, ...: marked `__sandbox__` by the bootstrap, see
    toolgym.sandbox.scripts) out of sys.modules, so that a program's `import limits` finds its own
    limits.py (or nothing), never ours. The scripts keep theirs: their globals hold them. Called once,
    by a fork server before it serves (forkserver.py): every program runs in one of its children."""
    for name in [n for n, m in sys.modules.items() if getattr(m, "__dict__", {}).get("__sandbox__") is True]:
        del sys.modules[name]


def run_as_main(path, filename):
    """Run the program in `path` as `python -I main.py` would, in this (forked) interpreter,
    then exit with its status: threads joined, atexit hooks run, streams flushed."""
    import builtins
    import types

    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    rc = 0
    try:
        with open(path, "rb") as fh:
            code = compile(fh.read(), filename, "exec")
        exec(code, main.__dict__)
    except SystemExit as exc:
        rc = exit_code(exc)
    except BaseException as exc:  # noqa: B036 - mirror the interpreter's top level
        if isinstance(exc, MemoryError):
            main.__dict__.clear()  # free the program's data so the report itself can allocate
        try:
            print_exc(exc)
        except MemoryError:
            os.write(2, b"MemoryError\n")
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
    flush()
    os._exit(rc)
