"""The SysV IPC objects of a sandbox: found (from /proc/sysvipc, or where there is none, gVisor, by id) and
removed by uid, so that no object a call made outlives it. Stdlib only."""

import errno
import os

from common import libc

IPC_RMID = 0


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


def remove_ipc(uid):
    if not os.path.isdir("/proc/sysvipc"):
        _ipc_scan(uid, remove=True)
        return
    for kind, ident in ipc_objects(uid):
        _ipc_call(kind, IPC_RMID, ident)
