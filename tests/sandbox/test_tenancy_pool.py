"""The pool's tenancy rule on workers that run nothing (the rule is bookkeeping; test_attack_shared_counters.py runs it on
real sandboxes): a worker that served a key for one tenant never serves it for another; the pool waits for a
busy worker that fits before it replaces an idle one."""

from __future__ import annotations

import threading
import time

from toolgym.sandbox.pool import Pool
from toolgym.sandbox.tenancy import conflict


class Idle:
    """A worker with no sandbox behind it."""

    def __init__(self) -> None:
        self.closed = False

    def call(self, req, timeout):
        return {"ok": True}

    def close(self) -> None:
        self.closed = True


def occ(key: str, tenant: str) -> frozenset:
    return frozenset({(key, tenant)})


def test_conflict_is_one_key_for_two_tenants():
    assert conflict({("k", "a")}, {("k", "b")})
    assert not conflict({("k", "a")}, {("k", "a"), ("j", "b")})
    assert not conflict({}, {("k", "b")})


def test_a_key_is_never_served_for_a_second_tenant_by_one_worker():
    pool = Pool(Idle, size=2)
    pool.wait_ready(10)
    first = pool.acquire(occupants=occ("task", "A"))
    pool.release(first)
    second = pool.acquire(occupants=occ("task", "B"))
    assert second is not first
    pool.release(second)
    again = pool.acquire(occupants=occ("task", "A"))  # the same tenant may come back to its worker
    assert again is first and pool.stats()["retired"] == 0
    pool.release(again)
    third = pool.acquire(occupants=occ("task", "C"))  # no live worker fits: one is replaced by a fresh one
    assert third not in (first, second) and pool.stats()["retired"] == 1
    assert first.closed or second.closed
    pool.release(third)
    pool.close()


START_S = 1.0  # how long a fresh sandbox of the test takes to start


def test_callers_that_no_idle_worker_fits_get_fresh_sandboxes_started_at_once():
    """Two callers of new tenants of served keys: each gets a fresh sandbox, both started together (a
    start is cheaper than waiting for a busy call), and a caller that fits an idle worker starts none."""
    starts = []

    class Slow(Idle):
        def __init__(self) -> None:
            super().__init__()
            starts.append(time.monotonic())
            time.sleep(START_S)

    pool = Pool(Slow, size=2)
    pool.wait_ready(10)
    for tenant in ("A", "B"):
        w = pool.acquire(occupants=occ("task", tenant))
        pool.release(w)
    del starts[:]
    got = []
    threads = [threading.Thread(target=lambda t=t: got.append(pool.acquire(occupants=occ("task", t))))
               for t in ("C", "D")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    # together: the second start began while the first was still starting (one after the other, they would
    # be START_S or more apart; a 0.25 s bound failed once at load 30, when a thread waited 0.38 s for a core)
    assert len(got) == 2 and len(starts) == 2 and abs(starts[0] - starts[1]) < START_S, starts
    assert pool.stats()["retired"] == 2
    for w in got:
        pool.release(w)
    w = pool.acquire(occupants=occ("task", "C"))  # C's worker fits C again: nothing retired
    assert pool.stats()["retired"] == 2
    pool.release(w)
    pool.close()


def test_a_call_is_formed_for_an_idle_worker_that_can_take_some_queued_job():
    """The judge forms a micro-batch for an idle sandbox: when the queue's first job is a second tenant of a key
    that sandbox served, the call takes the queued jobs it can (instead of a call that fits no idle sandbox
    and retires one: two retires in the judge benchmark's first pass before)."""
    from toolgym.sandbox.judging import _fitted

    served_a = {"k": "T1"}
    served_b = {"k": "T2", "j": "T4", "i": "T6"}
    queued = [occ("k", "T3"), occ("j", "T3"), occ("i", "T5")]
    assert _fitted([served_a], queued) is served_a
    assert _fitted([served_b, served_a], queued) is served_a  # takes the job after the first one
    assert _fitted([served_b, {}], queued) == {}  # a fresh worker takes the first job
    assert _fitted([served_a], [occ("k", "T3")]) is None  # nothing it can take: the call waits or retires


def _in(task: str, ep):
    """The occupants of a call made now in episode `ep` (of `task`)."""
    from toolgym.sandbox import tenancy

    with tenancy.within(ep):
        return tenancy.occupants_now()


def test_a_third_episode_carries_a_key_it_met_to_every_sandbox_it_enters(monkeypatch):
    """round 6, y01: R (task U) shares a sandbox with A (task T), then would enter the sandbox where C (task T)
    runs, and relay what A left. With TOOLGYM_TENANCY=transitive, R carries T for A from then on: it never
    enters C's sandbox, nor C R's."""
    from toolgym.sandbox import tenancy

    monkeypatch.setenv("TOOLGYM_TENANCY", "transitive")

    with tenancy.episode("T") as a, tenancy.episode("U") as r, tenancy.episode("T") as c:
        pool = Pool(Idle, size=1)
        pool.wait_ready(10)
        first = pool.acquire(occupants=_in("T", a))
        pool.release(first)
        assert pool.acquire(occupants=_in("U", r)) is first  # U and T may share: R reads what A left
        pool.release(first)
        cs = pool.acquire(occupants=_in("T", c))  # C gets a fresh sandbox (the rule for one key)
        assert cs is not first
        pool.release(cs)
        again = pool.acquire(occupants=_in("U", r))  # R would now write it where C reads
        assert again is not cs, "R relayed A's sandbox to C's"
        pool.release(again)
        later = pool.acquire(occupants=_in("T", c))  # and C never comes into a sandbox R has entered since
        assert later not in (first, again)
        pool.release(later)
        pool.close()


def test_what_an_episode_carries_ends_with_it(monkeypatch):
    from toolgym.sandbox import tenancy

    monkeypatch.setenv("TOOLGYM_TENANCY", "transitive")

    with tenancy.episode("T") as a:
        pool = Pool(Idle, size=1)
        pool.wait_ready(10)
        pool.release(pool.acquire(occupants=_in("T", a)))
        with tenancy.episode("U") as r:
            pool.release(pool.acquire(occupants=_in("U", r)))
            assert ("task:" + tenancy.digest("T"), a.tenant) in tenancy.with_carried(_in("U", r))
        assert r.tenant not in tenancy._CARRIED
        pool.close()


def test_episodes_carry_nothing_by_default_and_a_bad_mode_is_one_clear_line(monkeypatch):
    import pytest

    from toolgym.sandbox import tenancy

    monkeypatch.delenv("TOOLGYM_TENANCY", raising=False)
    with tenancy.episode("U") as r:
        assert r.tenant not in tenancy._CARRIED
    monkeypatch.setenv("TOOLGYM_TENANCY", "sometimes")
    with pytest.raises(ValueError, match="TOOLGYM_TENANCY='sometimes'"), tenancy.episode("U"):
        pass
