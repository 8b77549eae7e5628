"""Helpers shared by the built-in task families: source selection and partitions."""

from __future__ import annotations

from typing import Any

from toolgym.envs.sources import Adapter, TaskSource, load_source
from toolgym.errors import ConfigError


def build_source(data: Any, adapter: Adapter, *, split: str | None = None, partition: str | None = None,
                 test_fraction: float = 0.1, seed: int = 0, limit: int | None = None) -> TaskSource:
    """Load `data` (asset name, path, list or source) and optionally keep one hashed partition.

    `split` selects the file/asset split (e.g. "test"); `partition` ("train" | "test") then
    divides it deterministically by task id, for datasets that ship a single split.
    """
    source = load_source(data, adapter=adapter, split=split, limit=limit)
    if partition is None:
        return source
    if partition not in ("train", "test"):
        raise ConfigError(f"partition must be 'train', 'test' or None, got {partition!r}")
    train, test = source.split(test_fraction=test_fraction, seed=seed)
    return train if partition == "train" else test
