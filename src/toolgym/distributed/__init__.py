"""Rollout workers (sampler replica + envs + sandbox pool) scheduled by one driver: processes on this machine,
or Ray actors on a cluster.

Nothing here imports ray at package import time (`import toolgym` stays light); the submodules that
need it import it inside their functions. Ray is the optional ``ray`` extra: ``pip install 'toolgym[ray]'``.

- :mod:`toolgym.distributed.cluster`: join a cluster (``ray start``) or start a loopback-only local one.
- :mod:`toolgym.distributed.worker`: the rollout worker (a Ray actor, or one process of the local pool).
- :mod:`toolgym.distributed.local_pool`: :class:`LocalRolloutPool`, the same interface with worker processes on
  this machine (group deadlines, weights through shared memory; :mod:`.shared_weights`, :mod:`._process_worker`).
- :mod:`toolgym.distributed.driver`: :class:`RayRolloutPool`, the scheduler (back-pressure, weight
  versions, retries after worker death, exactly-once results).
- :mod:`toolgym.distributed.loadenv`: a synthetic tool-heavy environment for tests and benchmarks.
- :mod:`toolgym.distributed.sizing`: the throughput model behind the sizing guide.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GroupJob", "LocalRolloutPool", "RayRolloutPool", "connect", "shutdown"]


def __getattr__(name: str) -> Any:
    if name in ("GroupJob", "RayRolloutPool"):
        from toolgym.distributed import driver

        return getattr(driver, name)
    if name == "LocalRolloutPool":
        from toolgym.distributed import local_pool

        return local_pool.LocalRolloutPool
    if name in ("connect", "shutdown"):
        from toolgym.distributed import cluster

        return getattr(cluster, name)
    raise AttributeError(name)
