"""`logging.save_rollouts`: each training step's rollouts as a rollout file, for later analysis.

OUT/rollouts/step-0001.jsonl (one process) or step-0001-rank0.jsonl (one per process) plus its
`.meta.json` sidecar, written by the same writer as `toolgym rollout`, so `toolgym rollouts show`,
pandas and `datasets` read them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from toolgym.agents.storage import write_jsonl
from toolgym.agents.trajectory import Trajectory

log = logging.getLogger(__name__)


def step_rollouts_path(out: Path, step: int, rank: int = 0, world: int = 1) -> Path:
    """Where step `step` (1-based, as in metrics.jsonl) of process `rank` goes."""
    suffix = "" if world == 1 else f"-rank{rank}"
    return Path(out) / "rollouts" / f"step-{step:04d}{suffix}.jsonl"


def save_step_rollouts(cfg: Any, out: Path, step: int, groups: list[list[Trajectory]], dist: Any) -> Path:
    """Write this process's groups of one step; returns the file's path."""
    path = step_rollouts_path(out, step, dist.rank, dist.world)
    meta = {"step": step, "algorithm": cfg.algorithm, "env_id": cfg.rollout.env, "model": cfg.model.name_or_path,
            "rank": dist.rank, "world": dist.world, "groups": len(groups)}
    n = write_jsonl(path, [t for g in groups for t in g], meta)
    log.debug("step %d: %d rollouts -> %s", step, n, path)
    return path
