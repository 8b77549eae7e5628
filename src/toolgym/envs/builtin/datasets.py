"""Helpers shared by the built-in task families: source selection and partitions."""

from __future__ import annotations

from typing import Any

from toolgym.envs.sources import Adapter, ListSource, TaskSource, load_source, partition_source
from toolgym.envs.tasks import catalog
from toolgym.errors import ConfigError


def build_source(data: Any, adapter: Adapter, *, kind: str | None = None, split: str | None = None,
                 partition: str | None = None, test_fraction: float = 0.1, seed: int = 0, limit: int | None = None,
                 options: dict[str, Any] | None = None) -> TaskSource:
    """Load `data` (a source string, asset name, path, list or source) and optionally keep one hashed partition.

    A source string of a benchmark dataset ("livecodebench:PATH", "asset:mmlu", ...; `toolgym.envs.tasks.catalog`)
    is read by its task family with the environment's prompts and `options`; its tasks must be `kind`
    ("mc", "math", "code"). Anything else is read with `adapter`. `split` selects the file/asset split
    (e.g. "test"); `partition` ("train" | "test") then divides it deterministically by task id, for
    datasets that ship a single split.
    """
    opts = dict(options or {})
    if split is not None:
        opts.setdefault("split", split)
    if catalog.is_source_string(data) and catalog.dataset_of(data, opts) is not None:
        loaded = catalog.load(data, style="env", options=opts, seed=seed)
        if kind is not None and loaded.kind != kind:
            raise ConfigError(f"{data!r} holds {loaded.dataset} tasks ({loaded.kind}); this environment takes {kind} tasks")
        source: TaskSource = ListSource(loaded.tasks[:limit] if limit else loaded.tasks, str(data), split=split)
    else:
        source = load_source(data, adapter=adapter, split=split, limit=limit)
    return partition_source(source, partition, seed=seed, test_fraction=test_fraction)
