"""`logging.save_rollouts`: each training step's rollouts as a rollout file, for later analysis.

OUT/rollouts/step-0001.jsonl (one process) or step-0001-rank0.jsonl (one per process) plus its
`.meta.json` sidecar, written by the same writer as `toolgym rollout`, so `toolgym rollouts show`,
pandas and `datasets` read them. Two things only a training step knows go with them, for
`toolgym rollouts view`: each trajectory's `metadata["train"]` (the advantage it trained with, the update
passes, and the response positions the clip cut: training/outputs/update_record.py), and `<file>.tokens.json`, the
text of each token id the file uses (agents/token_text.py), so tokens can be shown without a tokenizer.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from toolgym.agents.storage import write_jsonl
from toolgym.agents.token_text import piece_table, write_token_text
from toolgym.agents.trajectory import Trajectory
from toolgym.training.outputs.update_record import UpdateRecord

log = logging.getLogger(__name__)


def step_rollouts_path(out: Path, step: int, rank: int = 0, world: int = 1) -> Path:
    """Where step `step` (1-based, as in metrics.jsonl) of process `rank` goes."""
    suffix = "" if world == 1 else f"-rank{rank}"
    return Path(out) / "rollouts" / f"step-{step:04d}{suffix}.jsonl"


def _with_train(t: Trajectory, record: UpdateRecord | None) -> Trajectory:
    info = record.for_trajectory(t) if record is not None else None
    if info is None:
        return t
    return dataclasses.replace(t, metadata={**t.metadata, "train": info})  # a copy: the step's own stays as it was


def save_step_rollouts(cfg: Any, out: Path, step: int, groups: list[list[Trajectory]], dist: Any,
                       record: UpdateRecord | None = None, tokenizer: Any = None) -> Path:
    """Write this process's groups of one step, with what the update recorded and the token pieces when
    given; returns the file's path."""
    path = step_rollouts_path(out, step, dist.rank, dist.world)
    envs = cfg.rollout.mixture()  # several environments: each trajectory's metadata["env"] says which
    meta = {"step": step, "algorithm": cfg.algorithm, "env_id": ", ".join(e.env for e in envs),
            "model": cfg.model.name_or_path, "rank": dist.rank, "world": dist.world, "groups": len(groups)}
    if len(envs) > 1:
        meta["envs"] = [{"name": e.label, "env": e.env, "weight": e.weight} for e in envs]
    trajs = [_with_train(t, record) for g in groups for t in g]
    n = write_jsonl(path, trajs, meta)
    if tokenizer is not None:
        write_token_text(path, piece_table(tokenizer, (i for t in trajs for i in t.response_ids)),
                         str(cfg.model.name_or_path))
    log.debug("step %d: %d rollouts -> %s", step, n, path)
    return path
