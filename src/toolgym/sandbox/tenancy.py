"""Whose calls a sandbox has served: no sandbox lifetime serves two episodes of one task.

Why: wiping a sandbox after a job resets what a program can see (files, processes, IPC objects), not
the kernel's counters: the next pid of the sandbox's pid namespace, the inode numbers of a tmpfs, the
SysV IPC id sequence. A program moves them and a later program in the same sandbox reads them, so two
rollouts of one policy on one task could pass an answer (a solver forks until the next pid encodes it, a
copier prints its own pid). Fresh namespaces per job need privileges Docker does not grant; instead the
pool never lets one sandbox lifetime serve two *tenants* under one *key*. Counters of the whole host
kernel (pipe and socket inode numbers, /proc/sys counts) are out of its reach: docs/threat-model.md.

A call carries occupants, (key, tenant) pairs. A judge job's key is its tests (a digest), its tenant the
episode that submitted it (or the job itself outside an episode); inside an episode (`episode`, opened by
the rollout runner) every call, tool calls and sessions included, also carries the episode's task key.
A worker that served key K for tenant A never serves K for another tenant: the pool picks another worker,
or replaces one (a fresh sandbox has served no one).

The rule is transitive for episodes (round-6 red team, y01: episode R of task U ran after solver A of task T
in one sandbox, read the counter A moved, and moved it again in another sandbox, where copier C of task T
read it). An episode carries what every sandbox lifetime it entered had served (`carried`): the pool adds
it to the episode's occupants at every call (`with_carried`) and adds the sandbox's served map to it
(`absorb`). So R, having shared a sandbox with A, holds T for A wherever it goes next, and no sandbox that
R has entered serves T for C: whatever moves from one tenant of a key to another crosses a sandbox that
served the key for both, which the rule forbids. Only episodes carry (`within` registers one); a call
outside an episode is its own tenant, once. Carrying is an option, `TOOLGYM_TENANCY=transitive`: on a
GRPO-shaped workload it more than doubles the sandboxes started and the wall time
(benchmarks/tenancy.py; docs/results/sandbox-speed.md), over the 10% a guard may cost; the default is
the rule per key.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import os
import threading
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

Occupants = frozenset[tuple[str, str]]
NONE: Occupants = frozenset()


@dataclass(frozen=True)
class Episode:
    """The task keys and the tenant id of the episode a call belongs to."""

    keys: tuple[str, ...]
    tenant: str


_EPISODE: contextvars.ContextVar[Episode | None] = contextvars.ContextVar("toolgym_episode", default=None)
_CARRIED: dict[str, set[tuple[str, str]]] = {}  # an episode's tenant -> the (key, tenant) pairs it carries
_CARRIED_LOCK = threading.Lock()


def transitive() -> bool:
    """Whether episodes carry the keys of the sandboxes they entered (env TOOLGYM_TENANCY=transitive)."""
    mode = os.environ.get("TOOLGYM_TENANCY", "per-key")
    if mode not in ("per-key", "transitive"):
        raise ValueError(f"TOOLGYM_TENANCY={mode!r}: use 'per-key' (the default) or 'transitive'")
    return mode == "transitive"


def current() -> Episode | None:
    return _EPISODE.get()


def new_episode(task: Any, tenant: str | None = None) -> Episode:
    """A new episode of `task` (any JSON-able description that is equal for the rollouts of one task);
    `tenant` names it when the caller has its own id (calls of one tenant may share a sandbox)."""
    return Episode(("task:" + digest(task),), tenant or uuid.uuid4().hex)


@contextlib.contextmanager
def within(ep: Episode | None) -> Iterator[Episode | None]:
    """Calls made inside (tasks and threads started from it inherit the context) belong to `ep`: for a
    caller whose episode spans several entries (an adapter called once per tool call)."""
    token = _EPISODE.set(ep)
    if ep is not None and transitive():
        with _CARRIED_LOCK:
            _CARRIED.setdefault(ep.tenant, set())
    try:
        yield ep
    finally:
        _EPISODE.reset(token)


@contextlib.contextmanager
def episode(task: Any, tenant: str | None = None) -> Iterator[Episode]:
    """Calls made inside belong to one new episode of `task` (see `new_episode`)."""
    with within(new_episode(task, tenant)) as ep:
        try:
            yield ep
        finally:
            with _CARRIED_LOCK:
                _CARRIED.pop(ep.tenant, None)  # it makes no call any more


def also(task: Any) -> None:
    """The current episode is of `task` too, from now on: the runner adds the task an environment drew
    (two seeds may draw one task) once its reset has said which."""
    ep = current()
    if ep is not None:
        _EPISODE.set(Episode((*ep.keys, "task:" + digest(task)), ep.tenant))


def digest(value: Any) -> str:
    return digest_text(json.dumps(value, sort_keys=True, default=repr, ensure_ascii=True))


def digest_text(text: str) -> str:
    """A key from text already serialized (a judge job's tests)."""
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def occupants_now(*keys: str) -> Occupants:
    """The occupants of a call made now: the current episode's task key, plus `keys` (a judge job's tests),
    all for the current episode (or for a tenant of their own outside one)."""
    ep = current()
    if ep is None:
        if not keys:
            return NONE  # a plain run outside an episode: nothing to keep apart
        tenant = uuid.uuid4().hex
        return frozenset((k, tenant) for k in keys)
    return frozenset((k, ep.tenant) for k in (*keys, *ep.keys))


def with_carried(occupants: Occupants) -> Occupants:
    """`occupants` and what each episode among them carries (see the module docstring)."""
    with _CARRIED_LOCK:
        extra = [_CARRIED[t] for t in {t for _, t in occupants} if t in _CARRIED]
        return occupants.union(*extra) if extra else occupants


def absorb(occupants: Iterable[tuple[str, str]], served: Mapping[str, str]) -> None:
    """Each episode among `occupants` has entered a sandbox lifetime that served `served` (key -> tenant):
    it carries all of it from now on."""
    with _CARRIED_LOCK:
        for tenant in {t for _, t in occupants}:
            if tenant in _CARRIED:
                _CARRIED[tenant].update(served.items())


def conflict(a: Mapping[str, str] | Iterable[tuple[str, str]], b: Iterable[tuple[str, str]]) -> bool:
    """Whether two sets of occupants (a: pairs, or a key -> tenant map) hold one key for two tenants (they
    may not share a sandbox lifetime)."""
    held = a if isinstance(a, Mapping) else dict(a)
    return any(held.get(k, t) != t for k, t in b)
