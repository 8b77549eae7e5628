"""Rollouts as Parquet: a typed, nested schema for analysis tools (pandas, DuckDB, Polars, `datasets`).

Token ids are list<int32>, the loss mask list<int8>, log-probs list<float64> (bit-exact), reward breakdown
and timings list<struct<key, value: float64>> (Arrow's map type has no `datasets` equivalent); each turn is a struct of role and content plus `extra`, the JSON of its
other keys (tool calls, finish reason), and `metadata` is a JSON string because its keys vary by
environment. The sidecar header lives in the file's schema metadata under `toolgym.rollouts`.
`read_parquet(write_parquet(x))` gives back equal trajectories, lone surrogates included (a program's
output or a model's text may hold one, which UTF-8 cannot encode): a turn's role or content holding
one travels in `extra`, and every JSON column escapes them, as the JSONL writer does.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from toolgym.agents.storage import HEADER_KIND, RolloutFileError, check_schema, escape_surrogates, header_for
from toolgym.agents.trajectory import SCHEMA_VERSION, Trajectory

_COLUMNS = ("role", "content")


def _pa() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet  # noqa: F401  (registers pa.parquet)
    except ImportError:
        raise RolloutFileError("Parquet needs pyarrow: pip install pyarrow (it comes with toolgym[tasks])") from None
    return pa


def schema() -> Any:
    """The Arrow schema of a rollout table."""
    pa = _pa()
    turn = pa.struct([("role", pa.string()), ("content", pa.string()), ("extra", pa.string())])
    floats = pa.list_(pa.struct([("key", pa.string()), ("value", pa.float64())]))
    return pa.schema([
        ("task_id", pa.string()), ("group_id", pa.string()),
        ("prompt_ids", pa.list_(pa.int32())), ("response_ids", pa.list_(pa.int32())),
        ("loss_mask", pa.list_(pa.int8())), ("behavior_logprobs", pa.list_(pa.float64())),
        ("reward", pa.float64()), ("reward_breakdown", floats),
        ("turns", pa.list_(turn)), ("finish_reason", pa.string()), ("error", pa.string()),
        ("timings", floats), ("metadata", pa.string()),
        ("token_versions", pa.list_(pa.int32())),
        ("schema_version", pa.int32()),
    ])


def _utf8(v: Any) -> bool:
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _json(v: Any) -> str:
    """JSON text that UTF-8 can encode: lone surrogates become JSON escapes (read back as themselves)."""
    return escape_surrogates(json.dumps(v, ensure_ascii=False))


def _turn_row(m: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {k: m[k] if isinstance(m.get(k), str) and _utf8(m[k]) else None for k in _COLUMNS}
    rest = {k: v for k, v in m.items() if row.get(k) is None}
    row["extra"] = _json(rest) if rest else None
    return row


def _turn_dict(row: dict[str, Any]) -> dict[str, Any]:
    m = {k: row[k] for k in _COLUMNS if row[k] is not None}
    if row["extra"] is not None:
        m.update(json.loads(row["extra"]))
    return m


def to_table(trajectories: Iterable[Trajectory], meta: dict[str, Any] | None = None) -> Any:
    """A pyarrow Table of the trajectories, with the header in the schema metadata."""
    pa = _pa()
    rows = []
    for t in trajectories:
        d = t.to_dict()
        d["turns"] = [_turn_row(m) for m in t.turns]
        d["metadata"] = _json(t.metadata)
        d["reward_breakdown"] = [{"key": k, "value": float(v)} for k, v in t.reward_breakdown.items()]
        d["timings"] = [{"key": k, "value": float(v)} for k, v in t.timings.items()]
        for k in ("task_id", "group_id", "finish_reason", "error"):  # plain text columns: escaped, not carried
            if isinstance(d.get(k), str) and not _utf8(d[k]):
                d[k] = escape_surrogates(d[k])
        rows.append(d)
    sch = schema().with_metadata({HEADER_KIND: _json(header_for(meta))})
    try:
        return pa.Table.from_pylist(rows, schema=sch)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
        raise RolloutFileError(f"trajectories do not fit the Parquet rollout schema: {exc}") from exc


def write_parquet(path: str | os.PathLike, trajectories: Iterable[Trajectory],
                  meta: dict[str, Any] | None = None) -> int:
    """Write one Parquet file (zstd). Returns the number of trajectories."""
    pa = _pa()
    table = to_table(trajectories, meta)
    tmp = os.fspath(path) + ".tmp"
    pa.parquet.write_table(table, tmp, compression="zstd")
    os.replace(tmp, path)
    return table.num_rows


def read_parquet_header(path: str | os.PathLike) -> dict[str, Any]:
    """The header stored in a rollout Parquet file ({} when it has none)."""
    pa = _pa()
    try:
        md = pa.parquet.read_schema(path).metadata or {}
    except (OSError, pa.ArrowInvalid) as exc:
        raise RolloutFileError(f"cannot read Parquet file {path}: {exc}") from exc
    raw = md.get(HEADER_KIND.encode())
    return json.loads(raw) if raw else {}


def read_parquet(path: str | os.PathLike) -> list[Trajectory]:
    """Trajectories from a file written by `write_parquet`."""
    pa = _pa()
    check_schema(path, read_parquet_header(path) or {"schema_version": SCHEMA_VERSION})
    try:
        rows = pa.parquet.read_table(path).to_pylist()
    except (OSError, pa.ArrowInvalid) as exc:
        raise RolloutFileError(f"cannot read Parquet file {path}: {exc}") from exc
    out = []
    for i, r in enumerate(rows):
        r["turns"] = [_turn_dict(m) for m in r["turns"]]
        r["metadata"] = json.loads(r["metadata"])
        r["reward_breakdown"] = {kv["key"]: kv["value"] for kv in r["reward_breakdown"]}
        r["timings"] = {kv["key"]: kv["value"] for kv in r["timings"]}
        try:
            out.append(Trajectory.from_dict(r))
        except (TypeError, ValueError) as exc:
            raise RolloutFileError(f"{path}: row {i} is not a trajectory ({exc})") from exc
    return out
