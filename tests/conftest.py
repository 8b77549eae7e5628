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



# The fast tier (`pytest -m "not slow"`, a few minutes on 2 cores) leaves out what the test files declare slow:
# `@pytest.mark.slow` on a test or a parametrize case, or `pytestmark = pytest.mark.slow` on a module. Mark a
# test slow when it takes over a second (pytest --durations shows it); tests/test_tiers.py checks the rule.


def _needs_docker(item: pytest.Item) -> bool:
    """A test parametrized over sandbox backends needs Docker for its ``docker`` case; tests that open a docker
    sandbox themselves carry ``@pytest.mark.docker``."""
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "docker" in {str(v) for v in callspec.params.values()}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark what each test needs, so ``-m "not docker"`` leaves out every test that opens a docker sandbox."""
    for item in items:
        if _needs_docker(item):
            item.add_marker(pytest.mark.docker)
