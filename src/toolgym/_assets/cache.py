"""The on-disk asset cache: where it lives, what a valid entry is, and how an entry is
installed atomically.

Layout under the cache root (``$TOOLGYM_HOME``, default ``~/.cache/toolgym``)::

    <name>/               one folder per asset; complete or absent, never half-written
      metadata.json       source, version, license, files (size + sha256), splits
      ...                 the asset's files
    .tmp/                 work folders of fetches in progress (same file system: rename is atomic)
    .locks/               one lock file per asset / download, so concurrent fetches serialize
    .downloads/           registry archives kept for reuse (checked by sha256 before each use)
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

METADATA = "metadata.json"
FORMAT_VERSION = 1


def cache_root() -> Path:
    """The cache root: ``$TOOLGYM_HOME`` if set, else ``~/.cache/toolgym``."""
    env = os.environ.get("TOOLGYM_HOME")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "toolgym"


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def describe_files(folder: Path) -> dict[str, dict[str, Any]]:
    """Size and sha256 of every file under ``folder`` (except the metadata itself)."""
    out: dict[str, dict[str, Any]] = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name != METADATA:
            rel = p.relative_to(folder).as_posix()
            out[rel] = {"size": p.stat().st_size, "sha256": sha256_file(p)}
    return out


def read_metadata(entry: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads((entry / METADATA).read_text())
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and isinstance(meta.get("files"), dict) else None


def check_entry(entry: Path, deep: bool = False) -> str | None:
    """Return None when ``entry`` is a complete cache entry, else why it is not.

    The quick check compares the file list and sizes with the metadata; ``deep`` also
    compares sha256 digests (what ``fetch`` does before trusting an existing entry).
    """
    if not entry.is_dir():
        return "missing"
    meta = read_metadata(entry)
    if meta is None:
        return "metadata.json is missing or unreadable"
    if meta.get("format_version") != FORMAT_VERSION:
        return f"cache format {meta.get('format_version')!r} is not {FORMAT_VERSION}"
    for rel, info in meta["files"].items():
        p = entry / rel
        try:
            size = p.stat().st_size
        except OSError:
            return f"file {rel} is missing"
        if size != info.get("size"):
            return f"file {rel} has {size} bytes, metadata says {info.get('size')}"
        if deep and sha256_file(p) != info.get("sha256"):
            return f"file {rel} does not match its sha256"
    return None


@contextlib.contextmanager
def locked(root: Path, key: str) -> Iterator[None]:
    """An exclusive inter-process lock on ``key`` (released when the holder dies, too)."""
    locks = root / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{key}.lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def clear_stale_work(root: Path, key: str) -> None:
    """Remove work folders a crashed fetch of ``key`` left behind. Call with the lock held:
    any folder with this prefix then belongs to a process that is gone."""
    tmp = root / ".tmp"
    if tmp.is_dir():
        for p in tmp.glob(f"{key}.*"):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def new_work_dir(root: Path, key: str) -> Path:
    tmp = root / ".tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{key}.", dir=tmp))


def install_entry(work: Path, entry: Path, metadata: dict[str, Any]) -> None:
    """Write the metadata last, then move ``work`` into place with a rename, replacing
    any old (broken) entry so readers only ever see a complete folder or none."""
    metadata = {**metadata, "format_version": FORMAT_VERSION, "files": describe_files(work)}
    (work / METADATA).write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
    old = None
    if entry.exists():
        old = entry.parent / ".tmp" / f"{entry.name}.old-{os.getpid()}"
        os.rename(entry, old)
    os.rename(work, entry)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def dir_size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
