"""Process and file clean-up shared by the scripts injected into a sandbox. Stdlib only.

Prepended to the executor's and the judge harness's source (see `sandbox/scripts.py`), so
each of them runs as one self-contained `python -c` program.
"""

import os
import signal
import sys
import time

RUN_UID = 65534  # untrusted code
EVAL_UID = 65533  # the judge's trusted evaluator and checkers (never the submission)
UNTRUSTED_UIDS = (RUN_UID, EVAL_UID)
PR_GET_DUMPABLE, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 3, 4, 36, 38
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


def other_pids(keep):
    me = os.getpid()
    return [int(n) for n in os.listdir("/proc") if n.isdigit() and int(n) != me and int(n) not in keep]


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
    """(kind, id) of the SysV IPC objects in this IPC namespace (of `uid`, if given)."""
    out = []
    for kind, uid_col in (("shm", 7), ("msg", 7), ("sem", 4)):
        try:
            with open(f"/proc/sysvipc/{kind}") as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            try:
                if uid is None or int(cols[uid_col]) == uid:
                    out.append((kind, int(cols[1])))
            except (IndexError, ValueError):
                continue
    return out


def remove_ipc(uid):
    c = libc()
    for kind, ident in ipc_objects(uid):
        if kind == "shm":
            c.shmctl(ident, IPC_RMID, None)
        elif kind == "msg":
            c.msgctl(ident, IPC_RMID, None)
        else:
            c.semctl(ident, 0, IPC_RMID, 0)


def _kill_as(uid, spare):
    """In a child already running as `uid`: kill every other process of that uid (all at
    once with kill(-1), so no chain of forks outruns it; one by one when a live session
    `spare` must stay), then its IPC objects. Exits 0 when none is left."""
    me = os.getpid()
    ok = False
    for _ in range(500):
        if spare is None:
            try:
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
        else:
            for pid in other_pids({me, spare}):
                if uid_of(pid) == uid:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
        if not any(uid_of(p) == uid for p in other_pids({me, spare})):
            ok = True
            break
        time.sleep(0.002)
    if spare is None:
        remove_ipc(uid)
    os._exit(0 if ok else 1)


def kill_uid(uid, spare=None):
    """Kill every process of `uid` (but `spare`) and remove its IPC objects. True if none is
    left. The killer is a fork of the caller, which must be root and non-dumpable: the
    child stays non-dumpable through the uid change and kills every other process of its
    uid first, so nothing can read the caller's memory through it."""
    pid = os.fork()
    if pid == 0:
        try:
            if prctl(PR_GET_DUMPABLE, 0) != 0:
                os._exit(3)
            drop_to(uid)
            _kill_as(uid, spare)
        finally:
            os._exit(2)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except ChildProcessError:
            return False
        except InterruptedError:
            continue
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


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


def read_exact(fd, n):
    """Exactly `n` bytes from `fd`, or None at the end of the stream."""
    chunks, got = [], 0
    while got < n:
        b = os.read(fd, min(n - got, 1 << 20))
        if not b:
            return None
        chunks.append(b)
        got += len(b)
    return b"".join(chunks)


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
