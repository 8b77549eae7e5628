"""Real rollout files for the viewer's tests, made once per session (tests/viewer/files.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .files import hostile, rollout, train_step


@pytest.fixture(scope="session")
def step_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real training step's rollouts (tiny demo model, tool-using warm start, one CTPO step)."""
    return train_step(tmp_path_factory.mktemp("step-run"))


@pytest.fixture(scope="session")
def rollout_file(step_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `toolgym rollout` of the model that training step saved."""
    model = next(step_file.parent.parent.glob("checkpoints/step-*/hf"))
    return rollout(model, tmp_path_factory.mktemp("rollout") / "arith.jsonl")


@pytest.fixture(scope="session")
def hostile_file(rollout_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The rollout file with every text field made hostile."""
    return hostile(rollout_file, tmp_path_factory.mktemp("hostile"))
