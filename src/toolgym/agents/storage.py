"""Rollouts on disk: plain JSONL, one trajectory per line, with the run's metadata in a sidecar file.

`rollouts.jsonl` holds only trajectory records, so `datasets.load_dataset("json", data_files=...)` and
`pandas.read_json(path, lines=True)` read it as-is; `rollouts.jsonl.meta.json` carries the schema version
and run metadata. Files of older toolgym versions, whose first line was that header, still read.
Python's float repr round-trips exactly, so log-probs read back bit-for-bit; ids stay ints.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from toolgym._jsonl import TORN, why
from toolgym._jsonl import iter_jsonl as _iter_jsonl
from toolgym.agents.trajectory import SCHEMA_VERSION, Trajectory
from toolgym.errors import ToolgymError

log = logging.getLogger(__name__)

HEADER_KIND = "toolgym.rollouts"
META_SUFFIX = ".meta.json"


class RolloutFileError(ToolgymError):
    """A rollout file is missing, unreadable, or of a newer schema."""


def meta_path(path: str | os.PathLike) -> Path:
    """The sidecar of a rollout file: `<file>.meta.json` beside it."""
    return Path(os.fspath(path) + META_SUFFIX)


def header_for(meta: dict[str, Any] | None) -> dict[str, Any]:
    """The header record (kind, schema version, run metadata) that a sidecar or a Parquet file carries."""
    return {"kind": HEADER_KIND, "schema_version": SCHEMA_VERSION, "meta": dict(meta or {})}


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _line(t: Trajectory) -> str:
    """One JSONL record. U+2028/U+2029 are escaped: tools that split lines the way str.splitlines does
    would otherwise cut a record in two. So is a lone surrogate (a program's text or output may hold one,
    which UTF-8 cannot encode): as a JSON escape it reads back as the same string."""
    text = t.to_json().replace("\u2028", "\\u2028").replace("\u2029", "\\u2029") + "\n"
    return escape_surrogates(text)


def escape_surrogates(text: str) -> str:
    """`text` with each lone surrogate written as its JSON escape (`\\ud800`): in JSON text, that reads
    back as the same string; UTF-8 cannot encode the character itself."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


def write_meta(path: str | os.PathLike, meta: dict[str, Any] | None = None) -> Path:
    """Write (or replace) the sidecar of `path` atomically. Returns the sidecar's path."""
    side = meta_path(path)
    side.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(side, json.dumps(header_for(meta), ensure_ascii=False, indent=1) + "\n")
    return side


def write_jsonl(path: str | os.PathLike, trajectories: Iterable[Trajectory], meta: dict[str, Any] | None = None) -> int:
    """Write the sidecar, then the trajectories atomically (temp file + rename). Returns the count."""
    path = Path(path)
    write_meta(path, meta)
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with open(tmp, "w", encoding="utf-8") as fh:
        for t in trajectories:
            fh.write(_line(t))
            n += 1
    os.replace(tmp, path)
    return n


class RolloutWriter:
    """Appends trajectories as they are produced, one group per `write`, each flushed to the OS at once:
    a run that is interrupted keeps every group it finished, and the file stays valid JSONL."""

    def __init__(self, path: str | os.PathLike, meta: dict[str, Any] | None = None, *, append: bool = False) -> None:
        """append=True keeps what the file holds (a resumed run adds the groups it lacked)."""
        self.path = Path(path)
        self.count = 0
        write_meta(self.path, meta)
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC), 0o644)
        except OSError as exc:
            raise RolloutFileError(f"cannot write rollout file {self.path}: {exc.strerror}") from exc

    def write(self, trajectories: Iterable[Trajectory]) -> int:
        """Append whole lines in one go (no half-written record survives a crash between groups)."""
        trajs = list(trajectories)
        data = "".join(_line(t) for t in trajs).encode("utf-8")
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        self.count += len(trajs)
        log.debug("%s: +%d trajectories (%d in all)", self.path, len(trajs), self.count)
        return len(trajs)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> RolloutWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_header(path: str | os.PathLike) -> dict[str, Any]:
    """{"kind", "schema_version", "meta"} from the sidecar, or from the first line of an older file;
    {} when the file has neither."""
    side = meta_path(path)
    if side.exists():
        try:
            obj = json.loads(side.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise RolloutFileError(f"{side}: not a readable JSON sidecar ({exc})") from exc
        if not isinstance(obj, dict) or obj.get("kind") != HEADER_KIND:
            raise RolloutFileError(f"{side}: not a toolgym rollout sidecar (kind must be {HEADER_KIND!r})")
        check_schema(side, obj)
        return obj
    with _open(path) as fh:
        first = fh.readline()
    try:
        obj = json.loads(first) if first.strip() else {}
    except ValueError as exc:
        cut = "" if first.endswith("\n") else TORN
        raise RolloutFileError(f"{path}:1: not valid JSON ({why(exc, first)}){cut}") from exc
    return obj if isinstance(obj, dict) and obj.get("kind") == HEADER_KIND else {}


def iter_jsonl(path: str | os.PathLike) -> Iterator[Trajectory]:
    """Trajectories in write order; a header line of an older file is checked and skipped."""
    if meta_path(path).exists():
        read_header(path)  # refuses a newer schema before any record is read
    with _open(path) as fh:
        for lineno, obj in _iter_jsonl(fh, name=path, error=RolloutFileError, objects=True):
            if obj.get("kind") == HEADER_KIND:
                check_schema(path, obj)
                continue
            try:
                yield Trajectory.from_dict(obj)
            except (TypeError, ValueError) as exc:
                raise RolloutFileError(f"{path}:{lineno}: not a trajectory ({exc})") from exc


def read_jsonl(path: str | os.PathLike) -> list[Trajectory]:
    """All trajectories of a file, in write order."""
    return list(iter_jsonl(path))


def group_by(trajectories: Iterable[Trajectory]) -> list[list[Trajectory]]:
    """Groups (same group_id) in first-seen order."""
    groups: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        groups.setdefault(t.group_id, []).append(t)
    return list(groups.values())


def check_schema(where: str | os.PathLike, obj: dict[str, Any]) -> None:
    """Refuse a header written by a newer toolgym, whose records this version may misread."""
    version = int(obj.get("schema_version", 0))
    if version > SCHEMA_VERSION:
        raise RolloutFileError(f"{where}: schema version {version} is newer than this toolgym ({SCHEMA_VERSION}); "
                               "upgrade toolgym")


def _open(path: str | os.PathLike):  # type: ignore[no-untyped-def]
    try:
        return open(path, encoding="utf-8")
    except OSError as exc:
        raise RolloutFileError(f"cannot read rollout file {path}: {exc.strerror}") from exc
