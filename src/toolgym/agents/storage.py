"""Rollouts on disk: JSONL, one trajectory per line, after one header line carrying the schema version.

Python's float repr round-trips exactly, so log-probs read back bit-for-bit; ids stay ints.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from toolgym.agents.trajectory import SCHEMA_VERSION, Trajectory
from toolgym.errors import ToolgymError

HEADER_KIND = "toolgym.rollouts"


class RolloutFileError(ToolgymError):
    """A rollout file is missing, unreadable, or of a newer schema."""


def write_jsonl(path: str | os.PathLike, trajectories: Iterable[Trajectory], meta: dict[str, Any] | None = None) -> int:
    """Write a header line and the trajectories atomically (temp file + rename). Returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with open(tmp, "w", encoding="utf-8") as fh:
        header = {"kind": HEADER_KIND, "schema_version": SCHEMA_VERSION, "meta": meta or {}}
        fh.write(json.dumps(header, ensure_ascii=False) + "\n")
        for t in trajectories:
            fh.write(t.to_json() + "\n")
            n += 1
    os.replace(tmp, path)
    return n


def read_header(path: str | os.PathLike) -> dict[str, Any]:
    """The header line's run metadata ({} for files without a header)."""
    with _open(path) as fh:
        first = fh.readline()
    try:
        obj = json.loads(first) if first.strip() else {}
    except ValueError as exc:
        raise RolloutFileError(f"{path}: line 1 is not JSON ({exc})") from exc
    return obj if obj.get("kind") == HEADER_KIND else {}


def iter_jsonl(path: str | os.PathLike) -> Iterator[Trajectory]:
    with _open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise RolloutFileError(f"{path}:{lineno}: not JSON ({exc})") from exc
            if obj.get("kind") == HEADER_KIND:
                if int(obj.get("schema_version", 0)) > SCHEMA_VERSION:
                    raise RolloutFileError(
                        f"{path}: schema version {obj['schema_version']} is newer than this toolgym "
                        f"({SCHEMA_VERSION}); upgrade toolgym"
                    )
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


def _open(path: str | os.PathLike):  # type: ignore[no-untyped-def]
    try:
        return open(path, encoding="utf-8")
    except OSError as exc:
        raise RolloutFileError(f"cannot read rollout file {path}: {exc.strerror}") from exc
