"""One loopback-only local Ray cluster shared by every test here (starting one costs seconds)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    from toolgym.distributed.cluster import connect, shutdown

    ray = connect(num_cpus=4)  # logical CPUs: 2 workers + a replacement never wait on each other
    yield ray
    shutdown()
