"""What the scripts injected into a sandbox share: its uids, prctl and libc, the process helpers (/proc,
pidfds, reaping), and how a program runs as `python -I main.py` would in a forked interpreter. Stdlib only.
Clean-up has files of its own: cleaner.py (the standing cleaners), sysvipc.py (IPC objects), wiping.py
(directories). Each script is shipped with the modules it imports (see `sandbox/scripts.py`), so each
runs as one self-contained `python -c` program.
"""

import errno
import os
import sys

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
