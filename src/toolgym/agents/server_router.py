"""Which inference server a request goes to, when several serve one policy (``rollout.servers: N``).

Two rules, in this order:

- a group's requests stay on one server: the episodes of a group share their prompt (and a multi-turn
  episode's later prompts extend its earlier ones), so the server that computed that prefix holds it in its
  prefix cache. A request names its group by ``SamplingParams.affinity``; the first request of a group picks
  the server, every later one follows it.
- a group that has no server yet goes to the one with the fewest requests outstanding (ties: the one that has
  served fewer requests so far), so servers stay evenly busy whatever the groups' lengths.

Pure bookkeeping, no I/O: the sampler calls :meth:`Router.acquire` before a request and
:meth:`Router.release` after it. The group-to-server map forgets its oldest groups past ``remember``
entries (a run's groups are new every step).
"""

from __future__ import annotations

import threading
from collections import OrderedDict


class Router:
    """Load- and group-aware choice among ``servers`` (their URLs)."""

    def __init__(self, servers: list[str], *, remember: int = 4096) -> None:
        if not servers:
            raise ValueError("a router needs at least one server")
        self.servers = list(servers)
        self.outstanding = [0] * len(servers)
        self.served = [0] * len(servers)
        self._groups: OrderedDict[str, int] = OrderedDict()
        self._remember = remember
        self._lock = threading.Lock()  # the pipeline's thread and the trainer's evaluations share a sampler

    def acquire(self, affinity: str | None = None) -> int:
        """The index of the server for one request of group ``affinity`` (None: no group), counted as
        outstanding until :meth:`release`."""
        with self._lock:
            i = self._groups.get(affinity) if affinity is not None else None
            if i is None:
                i = min(range(len(self.servers)), key=lambda k: (self.outstanding[k], self.served[k], k))
                if affinity is not None:
                    self._groups[affinity] = i
                    while len(self._groups) > self._remember:
                        self._groups.popitem(last=False)
            elif affinity is not None:
                self._groups.move_to_end(affinity)
            self.outstanding[i] += 1
            self.served[i] += 1
            return i

    def release(self, index: int) -> None:
        """One request on server ``index`` ended (answered or failed)."""
        with self._lock:
            self.outstanding[index] -= 1

    def server_of(self, affinity: str) -> int | None:
        """The server group ``affinity`` is pinned to (None: none yet, or forgotten)."""
        with self._lock:
            return self._groups.get(affinity)
