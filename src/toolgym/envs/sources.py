"""Task sources: where an environment's tasks come from.

A source is indexable (`get(i)`) with a `size` (None = unbounded, e.g. seeded generators).
Files (JSONL, JSON, CSV, Parquet, a Hugging Face `save_to_disk` folder) and the cached
datasets of `toolgym assets` are read into records, and a per-family adapter turns each
record into a Task; a bad record raises TaskValidationError naming the row and the field.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from toolgym._jsonl import iter_jsonl
from toolgym.envs.types import Task
from toolgym.errors import ConfigError

Adapter = Callable[[dict[str, Any], int], Task]


class TaskValidationError(ConfigError):
    """A record cannot become a Task; the message names the source, the row and the field."""


class TaskSource:
    """Base class. Subclasses implement `get(index)` and set `size`."""

    name: str = "tasks"
    size: int | None = None

    def get(self, index: int) -> Task:
        raise NotImplementedError

    def __len__(self) -> int:
        if self.size is None:
            raise TypeError(f"task source {self.name!r} is unbounded")
        return self.size

    def __iter__(self) -> Iterator[Task]:
        if self.size is None:
            raise TypeError(f"task source {self.name!r} is unbounded; use get(i)")
        return (self.get(i) for i in range(self.size))

    def split(self, test_fraction: float = 0.1, seed: int = 0) -> tuple[TaskSource, TaskSource]:
        """A deterministic (train, test) partition by hashed task id: stable under reordering."""
        if self.size is None:
            raise ConfigError(f"cannot split the unbounded source {self.name!r}; use two seeds instead")
        if not 0.0 <= test_fraction <= 1.0:
            raise ConfigError(f"test_fraction must be in [0, 1], got {test_fraction}")
        train, test = [], []
        for t in self:
            h = int.from_bytes(hashlib.sha256(f"{seed}:{t.id}".encode()).digest()[:8], "big") / 2**64
            (test if h < test_fraction else train).append(t)
        return ListSource(train, f"{self.name}[train]", split="train"), ListSource(test, f"{self.name}[test]", split="test")


PARTITIONS = ("train", "test")
TEST_FRACTION = 0.1


def partition_source(source: TaskSource, partition: str | None, *, seed: int = 0,
                     test_fraction: float = TEST_FRACTION) -> TaskSource:
    """One deterministic partition of `source`, so a run evaluates on tasks it never trained on.

    A sized source is split by hashed task id (`TaskSource.split`: stable under reordering); an unbounded
    one by index, train the even indices and test the odd ones (two disjoint streams of the same generator).
    None keeps the whole source."""
    if partition is None:
        return source
    if partition not in PARTITIONS:
        raise ConfigError(f"partition must be 'train', 'test' or None, got {partition!r}")
    if source.size is None:
        return _IndexPartition(source, partition)
    train, test = source.split(test_fraction=test_fraction, seed=seed)
    return train if partition == "train" else test


class _IndexPartition(TaskSource):
    """Every other index of an unbounded source: train 0, 2, 4, ...; test 1, 3, 5, ..."""

    def __init__(self, source: TaskSource, partition: str) -> None:
        self.source = source
        self.offset = 0 if partition == "train" else 1
        self.name = f"{source.name}[{partition}]"
        self.partition = partition

    def get(self, index: int) -> Task:
        task = self.source.get(2 * index + self.offset)
        task.metadata.setdefault("split", self.partition)
        return task


class ListSource(TaskSource):
    """Tasks held in memory."""

    def __init__(self, tasks: list[Task], name: str = "tasks", split: str | None = None) -> None:
        self.tasks = list(tasks)
        self.name = name
        self.size = len(self.tasks)
        if split is not None:
            for t in self.tasks:
                t.metadata.setdefault("split", split)

    def get(self, index: int) -> Task:
        return self.tasks[index % self.size]


class GeneratorSource(TaskSource):
    """An unbounded (or sized) source built from `fn(index) -> Task`; the same index gives the same task."""

    def __init__(self, fn: Callable[[int], Task], name: str = "generator", size: int | None = None) -> None:
        self.fn = fn
        self.name = name
        self.size = size

    def get(self, index: int) -> Task:
        return self.fn(index)


# ------------------------------------------------------------------------------------ reading


def read_records(path: str | Path, split: str | None = None) -> list[dict[str, Any]]:
    """Rows of a JSONL / JSON / CSV / Parquet file or a Hugging Face `save_to_disk` folder."""
    return _read_records(path, split)[1]


def _read_records(path: str | Path, split: str | None) -> tuple[list[int] | None, list[dict[str, Any]]]:
    """(the 1-based line of each row for JSON Lines, else None; the rows)."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ConfigError(f"task file {str(p)!r} does not exist")
    if p.is_dir():
        return None, _read_hf_disk(p, split)
    suffix = "".join(p.suffixes[-2:]) if p.name.endswith(".jsonl.gz") else p.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".jsonl.gz"):
        numbered = list(iter_jsonl(p, name=p.name, error=TaskValidationError, objects=True))
        return [n for n, _ in numbered], [row for _, row in numbered]
    if suffix == ".json":
        return None, _read_json(p, split)
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return None, pq.read_table(p).to_pylist()
    if suffix == ".csv":
        import csv

        with p.open(newline="", encoding="utf-8") as f:
            return None, [dict(r) for r in csv.DictReader(f)]
    if suffix == ".arrow":
        return None, _read_arrow(p)
    raise ConfigError(f"unsupported task file {p.name!r}: use .jsonl, .json, .csv, .parquet, .arrow or a datasets folder")


def _read_json(p: Path, split: str | None) -> list[dict[str, Any]]:
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise TaskValidationError(f"{p.name}: invalid JSON ({exc})") from None
    if isinstance(data, dict):
        if split is not None and isinstance(data.get(split), list):
            data = data[split]
        else:
            lists = [k for k, v in data.items() if isinstance(v, list)]
            if len(lists) == 1:
                data = data[lists[0]]
            else:
                raise TaskValidationError(f"{p.name}: expected a list of records (or one split key; found {lists})")
    if not isinstance(data, list):
        raise TaskValidationError(f"{p.name}: expected a list of records, got {type(data).__name__}")
    for i, row in enumerate(data):
        if not isinstance(row, dict):
            raise TaskValidationError(f"{p.name} row {i}: expected an object, got {type(row).__name__}")
    return data


def _read_arrow(p: Path) -> list[dict[str, Any]]:
    import pyarrow as pa

    try:
        with pa.memory_map(str(p)) as src:
            return pa.ipc.open_stream(src).read_all().to_pylist()
    except pa.ArrowInvalid:
        with pa.memory_map(str(p)) as src:
            return pa.ipc.open_file(src).read_all().to_pylist()


def _read_hf_disk(p: Path, split: str | None) -> list[dict[str, Any]]:
    """A `datasets` save_to_disk folder: a Dataset (state.json + *.arrow) or a DatasetDict (split folders)."""
    dd = p / "dataset_dict.json"
    if dd.exists():
        splits = json.loads(dd.read_text()).get("splits", [])
        if split is None:
            if len(splits) != 1:
                raise ConfigError(f"{p} holds splits {splits}; choose one with split=")
            split = splits[0]
        if split not in splits:
            raise ConfigError(f"{p} has no split {split!r}; it has {splits}")
        return _read_hf_disk(p / split, None)
    state = p / "state.json"
    if state.exists():
        files = [f["filename"] for f in json.loads(state.read_text()).get("_data_files", [])]
        paths = [p / f for f in files]
    else:
        paths = sorted(p.glob("*.arrow"))
    if not paths:
        raise ConfigError(f"{p} is not a datasets save_to_disk folder (no state.json or .arrow files)")
    rows: list[dict[str, Any]] = []
    for f in paths:
        rows.extend(_read_arrow(f))
    return rows


def records_to_source(rows: list[dict[str, Any]], adapter: Adapter, name: str, split: str | None = None,
                      lines: list[int] | None = None) -> ListSource:
    """Convert every record now, so a bad row fails at load time naming it: ``NAME:LINE`` when ``lines``
    gives each row's line in a JSON Lines file (as its parse errors do), else ``NAME row I`` (0-based)."""
    tasks = []
    for i, row in enumerate(rows):
        where = f"{name}:{lines[i]}" if lines is not None else f"{name} row {i}"
        try:
            task = adapter(row, i)
        except TaskValidationError as exc:
            raise TaskValidationError(f"{where}: {exc}") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise TaskValidationError(f"{where}: {type(exc).__name__}: {exc}") from None
        if split is not None:
            task.metadata.setdefault("split", split)
        tasks.append(task)
    return ListSource(tasks, name)


def require(row: dict[str, Any], field: str, types: type | tuple[type, ...] = str) -> Any:
    """row[field], or TaskValidationError naming the field when it is missing or of the wrong type."""
    if field not in row or row[field] is None:
        raise TaskValidationError(f"field {field!r} is missing (row has: {', '.join(map(str, list(row)[:12]))})")
    v = row[field]
    if isinstance(v, str) and not v.strip():
        raise TaskValidationError(f"field {field!r} is empty")
    if not isinstance(v, types):
        want = types.__name__ if isinstance(types, type) else " or ".join(t.__name__ for t in types)
        raise TaskValidationError(f"field {field!r} must be {want}, got {type(v).__name__}")
    return v


def generic_adapter(row: dict[str, Any], index: int) -> Task:
    """A record with `prompt` (messages or text) or `question`, and `answer`/`ground_truth`."""
    if "prompt" in row and isinstance(row["prompt"], list):
        prompt = row["prompt"]
        for j, m in enumerate(prompt):
            if not isinstance(m, dict) or "role" not in m or "content" not in m:
                raise TaskValidationError(f"field 'prompt' item {j} must be a message with 'role' and 'content'")
    else:
        text = row.get("question", row.get("prompt"))
        if text is None:
            raise TaskValidationError("field 'question' (or 'prompt') is missing")
        if not isinstance(text, str):
            raise TaskValidationError(f"field 'question' must be str, got {type(text).__name__}")
        prompt = [{"role": "user", "content": text}]
    gt = row.get("ground_truth", row.get("answer"))
    meta = dict(row.get("metadata") or {})
    return Task(id=str(row.get("id", index)), prompt=prompt, ground_truth=gt, metadata=meta)


def load_source(data: Any, adapter: Adapter = generic_adapter, split: str | None = None,
                name: str | None = None, limit: int | None = None) -> TaskSource:
    """A TaskSource from: a TaskSource, a list of Tasks/records, a file or folder path, or `asset:NAME`
    (also a bare asset name such as "gsm8k", or a Hugging Face Hub dataset id "owner/name[:config]",
    when no such file exists)."""
    if isinstance(data, TaskSource):
        return data
    if isinstance(data, list):
        if all(isinstance(t, Task) for t in data):
            return ListSource(data[:limit] if limit else data, name or "tasks")
        return records_to_source(data[:limit] if limit else data, adapter, name or "records", split)
    if isinstance(data, (str, Path)):
        s = str(data)
        asset = s[len("asset:"):] if s.startswith("asset:") else None
        if asset is None and not Path(s).expanduser().exists():
            from toolgym._assets.names import looks_like_path, split_hub_id

            if ("/" not in s and "." not in s) or (not looks_like_path(s) and split_hub_id(s) is not None):
                asset = s  # an asset name, or a Hugging Face Hub id (owner/name[:config])
        lines = None
        if asset is not None:
            from toolgym import assets

            rows = assets.load_records(asset, split=split)
            label = name or f"{asset}" + (f"[{split}]" if split else "")
        else:
            lines, rows = _read_records(s, split)
            label = Path(s).name if lines is not None else name or Path(s).name  # FILE:LINE names the file
        if limit:
            rows = rows[:limit]
        return records_to_source(rows, adapter, label, split, lines)
    raise ConfigError(f"cannot make a task source from {type(data).__name__}; pass a path, asset name or list")
