"""Checkpoints that resume exactly: model, optimizer, scheduler, every RNG, step and data cursor.

Written to a temp folder and renamed, so a kill -9 mid-save never leaves a checkpoint that loads.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

STATE_FILE = "trainer_state.pt"
META_FILE = "meta.json"


@dataclass
class TrainerState:
    """What the loop needs besides the weights to continue as if never stopped."""

    step: int = 0
    data_cursor: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def rng_state() -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    directory: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    state: TrainerState,
    rng: dict[str, Any] | None = None,
) -> Path:
    """Save to DIR/step-N atomically and point DIR/latest at it."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"step-{state.step:06d}"
    tmp = directory / f".tmp-step-{state.step:06d}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "rng": rng if rng is not None else rng_state(),
            "state": {"step": state.step, "data_cursor": state.data_cursor, "extra": state.extra},
        },
        tmp / STATE_FILE,
    )
    (tmp / META_FILE).write_text(json.dumps({"step": state.step, "data_cursor": state.data_cursor}))
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    latest_tmp = directory / f".latest-{os.getpid()}"
    latest_tmp.write_text(final.name)
    os.replace(latest_tmp, directory / "latest")
    return final


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The newest complete checkpoint, or None."""
    directory = Path(directory)
    pointer = directory / "latest"
    if pointer.exists():
        candidate = directory / pointer.read_text().strip()
        if (candidate / STATE_FILE).exists():
            return candidate
    done = sorted(p for p in directory.glob("step-*") if (p / STATE_FILE).exists())
    return done[-1] if done else None


def load_checkpoint(
    path: str | Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    restore_rng: bool = True,
) -> TrainerState:
    blob = torch.load(Path(path) / STATE_FILE, map_location="cpu", weights_only=False)
    model.load_state_dict(blob["model"])
    if optimizer is not None:
        optimizer.load_state_dict(blob["optimizer"])
    if scheduler is not None and blob.get("scheduler") is not None:
        scheduler.load_state_dict(blob["scheduler"])
    if restore_rng:
        set_rng_state(blob["rng"])
    s = blob["state"]
    return TrainerState(step=s["step"], data_cursor=s["data_cursor"], extra=s.get("extra", {}))
