"""One loopback-only local Ray cluster shared by every test here (starting one costs seconds)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    import os

    from toolgym.distributed.cluster import connect, shutdown

    # Ray's memory monitor kills workers when the whole machine is short of memory, whoever uses it; on a
    # shared test box that would be another job's memory. The OS OOM killer still applies.
    os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")

    ray = connect(num_cpus=4)  # logical CPUs: 2 workers + a replacement never wait on each other
    yield ray
    shutdown()


@pytest.fixture()
def one_torch_thread():
    """This process on one torch thread, as each Ray worker (cpus_per_worker 1): with the same rows per
    forward pass, its logits then match a worker's bit for bit."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
