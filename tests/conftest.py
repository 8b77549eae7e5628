"""Shared pytest configuration. Per-area fixtures live in each tests/<area>/conftest.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

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



# The fast tier (`pytest -m "not slow"`, a few minutes on 2 cores): a test is slow when marked so, or when its
# measured time (setup + call + teardown) in the last full run, kept in tests/durations.json by
# scripts/test_durations.py, is over SLOW_S. A test not measured yet counts as fast until the file is renewed.
SLOW_S = 1.0
_DURATIONS = Path(__file__).with_name("durations.json")


def _measured() -> dict[str, float]:
    try:
        return json.loads(_DURATIONS.read_text())["seconds"]
    except (OSError, ValueError, KeyError):
        return {}


def _needs_docker(item: pytest.Item) -> bool:
    """A test parametrized over sandbox backends needs Docker for its ``docker`` case; tests that open a docker
    sandbox themselves carry ``@pytest.mark.docker``."""
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "docker" in {str(v) for v in callspec.params.values()}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark what each test needs, so ``-m "not docker"`` leaves out every test that opens a docker sandbox, and
    ``-m "not slow"`` every test the last full run measured over SLOW_S."""
    measured = _measured()
    for item in items:
        if _needs_docker(item):
            item.add_marker(pytest.mark.docker)
        if measured.get(item.nodeid, 0.0) > SLOW_S:
            item.add_marker(pytest.mark.slow)
