"""Where a weight push to an engine's worker processes is written: ``/dev/shm`` when it has room, else disk.

vLLM's workers live in other processes and read new weights from a safetensors folder (``reload_weights``).
A folder in shared memory costs no disk I/O, but containers give ``/dev/shm`` 64 MB unless told otherwise
(``docker run --shm-size``), and a half-written file there fails the push with a bus error or ENOSPC. So the
free space is measured before each push, against the weights' size in the engine's dtype, and a temp folder
on disk (``TMPDIR``) takes over when shared memory is short; the choice and its reason fit one log line.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from toolgym.errors import ConfigError

SHM_DIR = "/dev/shm"
#: a weight folder's name: the prefix, the pid of the process that wrote it, a random part
STAGE_PREFIX = "toolgym-weights-"
#: room the safetensors header and the file system's own blocks need beyond the tensors' bytes
HEADROOM = 1 << 20


@dataclass(frozen=True)
class WeightRoute:
    """The folder a push is written under, what kind it is, and why (the log line)."""

    folder: str
    kind: str  # "shm" | "disk"
    note: str


def _mb(n: int) -> str:
    return f"{n / 2**20:.1f} MB"


def free_bytes(folder: str) -> int | None:
    """Free bytes of ``folder``'s file system; None when it is missing or not writable."""
    if not (os.path.isdir(folder) and os.access(folder, os.W_OK)):
        return None
    return shutil.disk_usage(folder).free


def decide(nbytes: int, shm_free: int | None, disk_free: int | None, *, shm_dir: str = SHM_DIR,
           disk_dir: str = "/tmp") -> WeightRoute:
    """The route for ``nbytes`` of weights given the free bytes measured in each place (None: unusable)."""
    need = nbytes + HEADROOM
    if shm_free is not None and shm_free >= need:
        return WeightRoute(shm_dir, "shm", f"weight push: {_mb(nbytes)} through {shm_dir} ({_mb(shm_free)} free)")
    why = (f"{shm_dir} is not writable" if shm_free is None
           else f"{shm_dir} has {_mb(shm_free)} free (containers default to 64 MB; docker run --shm-size raises it)")
    if disk_free is not None and disk_free >= need:
        return WeightRoute(disk_dir, "disk", f"weight push: {_mb(nbytes)} through a temp folder in {disk_dir} on "
                                             f"disk, slower: {why}")
    room = "not writable" if disk_free is None else f"{_mb(disk_free)} free"
    raise ConfigError(f"weight push: no room for {_mb(nbytes)} of weights: {why}, and {disk_dir} is {room}; "
                       "raise --shm-size or set TMPDIR to a folder with room")


def choose_route(nbytes: int, *, shm_dir: str = SHM_DIR, disk_dir: str | None = None) -> WeightRoute:
    """Measure both places now and :func:`decide` (``disk_dir`` defaults to ``TMPDIR``, else /tmp)."""
    disk = disk_dir or tempfile.gettempdir()
    return decide(nbytes, free_bytes(shm_dir), free_bytes(disk), shm_dir=shm_dir, disk_dir=disk)


def new_weight_folder(where: str) -> str:
    """An empty folder for one push under ``where``, named with this process's pid, after removing the folders
    of writers that are gone (a ``kill -9`` leaves them behind, in shared memory too)."""
    drop_orphans(where)
    return tempfile.mkdtemp(prefix=f"{STAGE_PREFIX}{os.getpid()}-", dir=where)


def drop_orphans(where: str) -> None:
    """Remove the weight folders whose writer (the pid in the name) no longer runs; others' are left alone."""
    for path in Path(where).glob(f"{STAGE_PREFIX}*"):
        pid, sep, _ = path.name[len(STAGE_PREFIX):].partition("-")
        if not sep or not pid.isdigit() or int(pid) == os.getpid():  # another writer's name, or this process
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except PermissionError:  # alive, someone else's
            pass
