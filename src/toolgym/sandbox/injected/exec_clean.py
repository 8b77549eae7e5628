"""Clean-up after a call, and the proof that the sandbox is clean: every process of the call's uids
killed by their standing cleaners, the work dir and temporary dirs wiped through directory descriptors,
no IPC object, no OOM kill, free disk. Also the call's files, written in and read back without following
a link. Stdlib only."""

import os
import signal
import time

import exec_state as state
from common import RUN_UID, WIPE_DIRS, live, other_pids, reap, tasks
from sysvipc import ipc_objects
from wiping import listing, protector, wipe


def keep_pids():
    keep = {state.TEMPLATE.pid} if state.TEMPLATE else set()
    keep |= {c.pid for c in state.CLEANERS.values()}
    if state.SESSION:
        keep.add(state.SESSION["pid"])
    return keep


def kill_all(keep=(), patience=10.0):
    """Kill every process of the sandbox but us, the template (and `keep`). True if none is left.

    Untrusted uids are killed by their own cleaner (an atomic kill(-1)); this catches what
    is left, e.g. a trusted judge harness's helpers. Dying processes need CPU time to exit
    and share the sandbox's CPU quota: wait for them (with back-off) up to `patience` s."""
    keep = set(keep) | keep_pids()
    deadline = time.monotonic() + patience
    pause = 0.0005
    while True:
        reap()
        pids = [p for p in other_pids(keep) if live(p)]
        if not pids:
            return True
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        reap()
        if time.monotonic() > deadline:
            return not [p for p in other_pids(keep) if live(p)]
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def safe_path(root, name):
    if not isinstance(name, str) or not name or "\x00" in name:
        raise ValueError(f"bad file name {name!r}")
    if name.startswith("/") or any(part in ("..",) for part in name.split("/")):
        raise ValueError(f"file name {name!r} escapes the work dir")
    path = os.path.normpath(os.path.join(root, name))
    if not path.startswith(root + "/"):
        raise ValueError(f"file name {name!r} escapes the work dir")
    return path


_PROTECTED = []  # wiping.protector(state.WORKROOT), made once at start-up (it resolves 3 paths: ~20 us a use)


def protected(path):
    if not _PROTECTED:
        _PROTECTED.append(protector(state.WORKROOT))
    return _PROTECTED[0](path)


def _wipe(path, spare=()):
    return wipe(path, spare, protected)


def _listing(path, spare=()):
    return listing(path, spare, protected)


def clean_uids(uids, spare=None):
    """Kill what every untrusted uid a call may have used left behind. True if none is left.

    Skipped when the sandbox's pids cgroup counts no task beyond those at start-up (the
    executor, the cleaners, the template) and a live session: that count is exact and includes
    forks in progress, and no other process exists that could create one. Never forks: the
    cleaners stand (a program may have filled the process table)."""
    reap()
    quiet = state.BASE_TASKS[0] is not None and tasks() == state.BASE_TASKS[0] + (1 if state.SESSION else 0)
    ok = True
    for uid in uids:
        cleaner = state.CLEANERS.get(uid)
        if cleaner is None:
            ok = False
        elif quiet and (spare is not None or not ipc_objects(uid)):
            ok = cleaner.intact() and ok  # nothing of this uid runs, and it holds no IPC object to remove
        else:
            ok = cleaner.sweep(spare) and ok
    return ok


def check_health(oom, uids=(RUN_UID,), before_wipe=None):
    """Clean up after a call and prove the sandbox clean; anything left makes it unhealthy."""
    spare = state.SESSION["pid"] if state.SESSION else None
    reasons = []
    if not clean_uids(uids, spare):
        reasons.append("leftover processes")
    if not kill_all():  # what a trusted harness left
        reasons.append("leftover processes")
    if before_wipe is not None:
        before_wipe()  # nothing runs any more: files hold still
    keep = ("session",) if state.SESSION else ()
    # a live session keeps its files in /tmp between its cells; they go when it ends
    dirs = [state.WORKROOT, *(WIPE_DIRS if state.WIPE_TMP and spare is None else ())]
    if not all([_wipe(d, keep if d == state.WORKROOT else ()) for d in dirs]) or any(
            _listing(d, keep if d == state.WORKROOT else ()) for d in dirs):
        reasons.append("work dir not clean" if _listing(state.WORKROOT, keep) else "temporary dirs not clean")
    if spare is None and ipc_objects():
        reasons.append("IPC objects left")
    if oom:
        reasons.append("out of memory")
    for path in (state.WORKROOT, "/tmp"):
        try:
            st = os.statvfs(path)
            if st.f_bavail * st.f_frsize < (4 << 20):
                reasons.append(f"disk full at {path}")
        except OSError:
            pass
    return {"healthy": not reasons, "reason": ", ".join(dict.fromkeys(reasons))}


def write_file(path, data, uid, cwd):
    """Write a request's file as root, owned by the call's uid (its parents too)."""
    d = os.path.dirname(path)
    parts = os.path.relpath(d, cwd).split("/") if d != cwd else []
    cur = cwd
    for part in parts:
        cur = os.path.join(cur, part)
        if not os.path.isdir(cur):
            os.mkdir(cur, 0o700)
            os.chown(cur, uid, uid)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchown(fd, uid, uid)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def read_file_back(cwd, name, cap, uid):
    """A file the program wrote: every path part opened without following links, a regular
    file owned by the call's uid, at most `cap` bytes. None otherwise."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    parts = name.split("/")
    fd = os.open(cwd, flags | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, flags | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = nxt
        leaf = os.open(parts[-1], flags | os.O_NONBLOCK, dir_fd=fd)
    finally:
        os.close(fd)
    try:
        st = os.fstat(leaf)
        import stat

        if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
            return None
        chunks, got = [], 0
        while got < cap:
            b = os.read(leaf, min(cap - got, 1 << 20))
            if not b:
                break
            chunks.append(b)
            got += len(b)
        return b"".join(chunks)
    finally:
        os.close(leaf)


def remove_dir(path):
    _wipe(path)
    try:
        os.rmdir(path)
    except OSError:
        pass
