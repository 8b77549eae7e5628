"""One streaming pass over a rollout file: where each episode's line starts, and the few fields the
episode list shows and filters on.

Why an index: a 100 MB file must not be parsed into the page. The page holds only this summary (tens of
bytes per episode) and asks for the full episodes it shows; the server answers by seeking to their byte
offsets, and a static page reads them from chunks of consecutive episodes (`chunks`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym._jsonl import why
from toolgym.agents.storage import HEADER_KIND, RolloutFileError, check_schema, read_header
from toolgym.agents.trajectory import Trajectory

CHUNK_BYTES = 1 << 20  # a static page's data chunk: about this much of the file...
CHUNK_EPISODES = 200  # ...or this many episodes, whichever comes first


def finite(x: Any) -> float | None:
    """A JSON-safe number: None for NaN/inf and non-numbers (JSON has no NaN; the page shows "nan")."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


class _Interned:
    """Strings stored once, episodes point at them by position (task and group ids repeat a lot)."""

    def __init__(self) -> None:
        self.values: list[str] = []
        self._pos: dict[str, int] = {}

    def __call__(self, value: Any) -> int:
        s = value if isinstance(value, str) else json.dumps(value)
        if s not in self._pos:
            self._pos[s] = len(self.values)
            self.values.append(s)
        return self._pos[s]


@dataclass
class Index:
    """Byte offsets, lengths and summaries of every episode of a JSONL rollout file."""

    path: Path
    meta: dict[str, Any]
    offsets: list[int] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    columns: dict[str, list[Any]] = field(default_factory=dict)
    chunks: list[int] = field(default_factory=list)  # first episode of each chunk
    warnings: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offsets)

    def chunk_range(self, c: int) -> range:
        """The episodes of chunk `c`."""
        end = self.chunks[c + 1] if c + 1 < len(self.chunks) else len(self)
        return range(self.chunks[c], end)

    def read(self, ids: Iterable[int]) -> list[dict[str, Any]]:
        """The stored records of episodes `ids`, read by seeking (the file is not read whole)."""
        out = []
        try:
            with open(self.path, "rb") as fh:
                for i in ids:
                    fh.seek(self.offsets[i])
                    out.append(json.loads(fh.read(self.lengths[i])))
        except OSError as exc:
            raise RolloutFileError(f"cannot read rollout file {self.path}: {exc.strerror}") from exc
        except ValueError as exc:
            raise RolloutFileError(f"{self.path} changed since it was indexed ({exc}); open it again") from exc
        return out


def _summary(obj: dict[str, Any]) -> dict[str, Any]:
    turns = obj.get("turns") or []
    assistant = [m for m in turns if isinstance(m, dict) and m.get("role") == "assistant"]
    train = (obj.get("metadata") or {}).get("train")
    row = {"r": finite(obj.get("reward")), "n": len(assistant),
           "c": sum(1 for m in turns if isinstance(m, dict) and m.get("role") == "tool"),  # results: calls that ran
           "k": len(obj.get("response_ids") or []), "m": sum(1 for x in obj.get("loss_mask") or [] if x),
           "e": 1 if obj.get("error") else 0, "a": None, "x": 0}
    if isinstance(train, dict):
        adv = train.get("advantage")
        if isinstance(adv, list):  # per-token advantages: the list shows their mean
            vals = [v for v in (finite(a) for a in adv) if v is not None]
            adv = sum(vals) / len(vals) if vals else None
        row["a"] = finite(adv)
        clip = train.get("clip") if isinstance(train.get("clip"), dict) else {}
        row["x"] = len({p for kind in ("high", "low", "dual") for p in clip.get(kind) or []
                        if isinstance(p, int) and 0 <= p < row["k"]})
    return row


def build_index(path: str | os.PathLike, chunk_bytes: int = CHUNK_BYTES,
                chunk_episodes: int = CHUNK_EPISODES) -> Index:
    """Read `path` once, line by line; raise a one-line RolloutFileError naming `file:line` for a bad record.

    An incomplete last line (a writer still running, or interrupted) is left out with a warning."""
    path = Path(path)
    if path.suffix == ".parquet":
        raise RolloutFileError(f"{path}: the viewer reads JSONL rollout files (those `toolgym rollout` and "
                               "training steps write); give it the .jsonl the Parquet file was exported from")
    index = Index(path=path, meta=read_header(path).get("meta", {}))
    tasks, groups, finishes = _Interned(), _Interned(), _Interned()
    cols: dict[str, list[Any]] = {k: [] for k in ("t", "g", "f", "r", "n", "c", "k", "m", "e", "a", "x")}
    pos = 0
    chunk_start_pos = -1
    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise RolloutFileError(f"cannot read rollout file {path}: {exc.strerror}") from exc
    with fh:
        for lineno, line in enumerate(fh, 1):
            start, pos = pos, pos + len(line)
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as exc:
                if not line.endswith(b"\n"):
                    index.warnings.append(f"line {lineno} is incomplete (was the writer interrupted, or is it "
                                          "still running?): left out")
                    break
                raise RolloutFileError(f"{path}:{lineno}: not valid JSON "
                                       f"({why(exc, line.decode('utf-8', 'replace'))})") from None
            if not isinstance(obj, dict):
                raise RolloutFileError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            if obj.get("kind") == HEADER_KIND:  # the header line of a file from an older toolgym
                check_schema(path, obj)
                if not index.meta:
                    index.meta = obj.get("meta") or {}
                continue
            try:
                Trajectory.from_dict(obj)  # the same checks as every other reader of rollout files
            except (TypeError, ValueError) as exc:
                raise RolloutFileError(f"{path}:{lineno}: not a trajectory ({exc})") from exc
            i = len(index.offsets)
            if chunk_start_pos < 0 or start - chunk_start_pos >= chunk_bytes \
                    or i - index.chunks[-1] >= chunk_episodes:
                index.chunks.append(i)
                chunk_start_pos = start
            index.offsets.append(start)
            index.lengths.append(len(line))
            cols["t"].append(tasks(obj.get("task_id")))
            cols["g"].append(groups(obj.get("group_id")))
            cols["f"].append(finishes(obj.get("finish_reason") or ""))
            for k, v in _summary(obj).items():
                cols[k].append(v)
    cols.update(tasks=tasks.values, groups=groups.values, finishes=finishes.values)
    index.columns = cols
    return index
