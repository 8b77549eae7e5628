"""Fixtures for environment tests: real sandboxes (local bubblewrap, docker when available).

Outside CI a missing backend skips its tests; with CI=true it fails them, so CI never
silently skips tool execution.
"""

from __future__ import annotations

import pytest

from tests.requirements import need
from toolgym.errors import ToolgymError


def _open(backend: str):
    from toolgym.sandbox import Limits, open_sandbox

    sb = open_sandbox(backend, Limits(timeout_s=10, memory_mb=512), pool_size=1)
    try:
        r = sb.run("print(6 * 7)")
        if r.stdout.strip() != "42":
            raise ToolgymError(f"{backend} sandbox is not healthy: {r.status} {r.stderr[-300:]}")
    except Exception:
        sb.close()
        raise
    return sb


def _backend_fixture(backend: str):
    try:
        sb = _open(backend)
    except Exception as exc:  # missing engine, image or bubblewrap
        need(False, f"the {backend} sandbox is unavailable: {exc}")
    return sb


@pytest.fixture(scope="session")
def local_sandbox():
    sb = _backend_fixture("local")
    yield sb
    sb.close()


@pytest.fixture(scope="session", params=["local", "docker"])
def any_sandbox(request):
    """Each available backend in turn (docker needs the engine and the toolgym image)."""
    sb = _backend_fixture(request.param)  # a missing engine skips locally and fails under CI
    yield sb
    sb.close()
