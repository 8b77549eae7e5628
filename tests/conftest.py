"""Shared pytest configuration. Per-area fixtures live in each tests/<area>/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture
def device() -> Iterator[str]:
    """The accelerator under test: ``"cuda"`` where a GPU is visible (scripts/gpu_check.sh), else the CPU
    stand-in device of tests/device_standin.py, which refuses what CUDA refuses and computes real values.
    Tests that take it are marked ``device_standin``."""
    import torch

    if torch.cuda.is_available():
        yield "cuda"
        return
    from tests.device_standin import STANDIN, standin_mode

    with standin_mode():
        yield STANDIN
