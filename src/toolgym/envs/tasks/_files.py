"""Reading benchmark record files kept in their published formats: JSONL / JSON / Parquet (one file or a
folder of them). A missing path is an AssetError (the data is not there yet), a malformed line a ConfigError."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from toolgym._jsonl import iter_jsonl
from toolgym.errors import AssetError, ConfigError

SUFFIXES = (".jsonl", ".json", ".parquet")


def data_files(path: str | Path, pattern: str = "*") -> list[Path]:
    """The record files at `path` (a file, or a folder's files matching `pattern`), sorted."""
    p = Path(path).expanduser()
    if not p.exists():
        raise AssetError(f"{p} does not exist; download the benchmark files there or pass another path")
    if p.is_file():
        return [p]
    files = sorted(f for f in p.glob(pattern) if f.suffix in SUFFIXES and f.is_file())
    if not files:
        raise AssetError(f"no .jsonl/.json/.parquet files matching {pattern!r} in {p}")
    return files


def iter_records(path: Path) -> Iterator[dict[str, Any]]:
    """Records of one file; a malformed line names the file and line."""
    for _, row in iter_numbered_records(path):
        yield row


def iter_numbered_records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, record) of one file: ``FILE:LINE`` for JSON Lines (1-based, blank lines counted, as an editor
    and the parse error number them), ``FILE record N`` (1-based) for a JSON array or Parquet rows."""
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise ConfigError(f"{path}: reading Parquet needs pyarrow (pip install 'toolgym[tasks]')") from None
        for n, row in enumerate(pq.read_table(path).to_pylist(), 1):
            yield f"{path} record {n}", row
        return
    if path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        rows = data if isinstance(data, list) else data.get("data", data.get("problems", []))
        for n, row in enumerate(rows, 1):
            yield f"{path} record {n}", row
        return
    for line, row in iter_jsonl(path, error=ConfigError):
        yield f"{path}:{line}", row
