"""LocalRolloutPool: rollout workers as processes on this machine, with the Ray pool's interface and no Ray.

Why processes: environments, reward functions and the parsing of model text then run outside the trainer's
process. A reward function stuck in a backtracking regular expression holds the interpreter lock, and every
thread of its process stops with it; here that process is a worker, which the pool kills when its group runs
past ``group_deadline_s``. Only that group fails: its ``group_size`` episodes come back with reward 0 and
``finish_reason`` "worker_timeout", one of the infrastructure failures that training leaves out and
``trajectory_stats`` counts (``INFRA_FAILURES``). The other groups the killed worker held are resubmitted,
not failed: their seeds make them come out the same wherever they run.

Which group is to blame: a hung reward function freezes its whole process, so every group in flight there
stops, and the groups submitted with the guilty one run past the deadline with it. A group past its deadline
alone on its worker is failed at once; one that shared its worker is resubmitted as a suspect, which runs
alone on an idle worker and fails only if it runs past the deadline again. So an honest group is never
failed for another's hang, and a guilty one costs at most two deadlines. A worker that dies by itself (OOM
kill, ``kill -9``) has its groups retried, as in :class:`~toolgym.distributed.driver.RayRolloutPool`, and is
replaced with the current weights.

Each worker process runs the same :class:`~toolgym.distributed.worker.RolloutWorker` as a Ray actor
(``_process_worker``): a sampler replica, a sandbox pool, one fresh environment per episode. Weights travel
through shared memory (:mod:`.shared_weights`): packed once per push, whatever the number of workers. With
``server`` the workers hold no replica: each samples from the inference servers through a client
(:mod:`.server_clients`), weights go to the servers and never here, and :meth:`LocalRolloutPool.label_version`
tells the workers which version the servers hold (recorded on a group as the version it started with).

Threads: ``run`` may go on in one thread while ``push_weights`` is called from another (an asynchronous
trainer); a push reaches each worker between two of its messages, and every token records the version that
sampled it (``Trajectory.token_versions``). Processes are started from one long-lived thread of the pool,
because the kernel's parent-death signal fires when the thread that started a child ends, not its process.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from toolgym.distributed.driver import GroupJob, PoolStats, RolloutPoolError

WORKER_TIMEOUT = "worker_timeout"


@dataclass
class _Slot:
    index: int
    proc: Any = None
    conn: Any = None
    generation: int = 0
    state: str = "dead"  # starting | ready | dead
    version: int = -1  # the weights version the worker acknowledged
    tickets: dict[int, tuple[GroupJob, float]] = field(default_factory=dict)  # ticket -> (job, submitted at)
    info: dict[str, Any] | None = None
    info_pending: bool = False


class LocalRolloutPool:
    """``num_workers`` rollout worker processes (``multiprocessing`` spawn), each on ``threads`` torch threads.

    ``weights``: the initial policy under the plain transformers model's names (default
    ``model.state_dict()``). ``group_deadline_s``: wall seconds a group may take from its submission to a
    worker (0: no limit). ``max_in_flight``: groups a worker runs at once."""

    def __init__(self, model: Any, tokenizer: Any, *, num_workers: int = 1, threads: int = 1,
                 sandbox: str | None = "auto", sandbox_pool: int = 1, max_in_flight: int = 2,
                 group_deadline_s: float = 1800.0, sampler_kwargs: dict[str, Any] | None = None,
                 tool_parser: str | None = None, weights: dict[str, Any] | None = None,
                 max_replacements: int = 8, max_attempts: int = 4, server: dict[str, Any] | None = None) -> None:
        """``server``: the workers sample from running servers (:func:`~.server_clients.client_options`);
        ``model`` may then be None."""
        import multiprocessing
        from concurrent.futures import ThreadPoolExecutor

        from toolgym.distributed import shared_weights

        if num_workers < 1 or max_in_flight < 1 or threads < 1:
            raise RolloutPoolError("num_workers, threads and max_in_flight must be >= 1")
        if group_deadline_s < 0:
            raise RolloutPoolError(f"group_deadline_s must be >= 0 (0: no limit), not {group_deadline_s}")
        self.num_workers, self.max_in_flight = num_workers, max_in_flight
        self.group_deadline_s = float(group_deadline_s)
        self.max_replacements, self.max_attempts = max_replacements, max_attempts
        self.stats = PoolStats()
        self.version = 0
        self._ctx = multiprocessing.get_context("spawn")
        # one thread starts every worker and lives as long as the pool (PR_SET_PDEATHSIG is per thread)
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="toolgym-rollout-spawner",
                                           initializer=_block_sigint)
        self._lock = threading.RLock()
        self.server = server
        self._config = None if server is not None else model.config
        self._tokenizer = tokenizer
        self._weights = None if server is not None else shared_weights.pack(
            model.state_dict() if weights is None else weights)
        self._worker_kw = {"sandbox": sandbox, "sandbox_pool": sandbox_pool, "threads": int(threads),
                           "sampler_kwargs": dict(sampler_kwargs or {}), "tool_parser": tool_parser,
                           "server": server}
        self._tickets: dict[int, tuple[int, GroupJob]] = {}  # ticket -> (slot, job), while in flight
        self._next_ticket = 0
        self._done: dict[int, tuple[str, Any, GroupJob]] = {}  # ticket -> (result | error | failed, payload, job)
        self._requeue: list[tuple[int, GroupJob]] = []  # (ticket, job) whose worker was lost
        self._suspects: set[tuple[int, int]] = set()  # keys of groups that ran past a deadline on a shared worker
        self._abandoned: set[int] = set()  # tickets of a run that ended early: their results are dropped
        self._closed = False
        self.slots = [_Slot(i) for i in range(num_workers)]
        try:
            for s in self.slots:
                self._spawn(s)
            self.wait_ready()
        except BaseException:
            self.close()
            raise

    # -- public -------------------------------------------------------------------------------------------

    def pids(self) -> list[int | None]:
        """Each slot's current worker process id (None: no live worker)."""
        return [s.proc.pid if s.state != "dead" and s.proc is not None else None for s in self.slots]

    def inflight(self) -> list[int]:
        """Groups submitted and not yet returned, per slot."""
        return [len(s.tickets) for s in self.slots]

    def wait_ready(self) -> list[dict[str, Any] | None]:
        """Block until no worker is starting (a replacement loads its model), then :meth:`worker_info`."""
        while True:
            with self._lock:
                if not any(s.state == "starting" for s in self.slots):
                    break
            self._pump(0.5)
        return self.worker_info()

    def worker_info(self) -> list[dict[str, Any] | None]:
        """Each live worker's slot, pid, weight version, groups done and busy seconds (None: unreachable)."""
        with self._lock:
            for s in self.slots:
                s.info, s.info_pending = None, False
                if s.state == "ready":
                    try:
                        s.conn.send(("info",))
                        s.info_pending = True
                    except OSError:
                        pass
            end = time.monotonic() + 30
            while any(s.info_pending and s.state == "ready" for s in self.slots) and time.monotonic() < end:
                self._pump(0.5)
            return [s.info if s.state == "ready" and not s.info_pending else None for s in self.slots]

    def push_weights(self, state_dict: dict[str, Any], version: int | None = None) -> int:
        """Send new weights to every worker; returns their version (None: the last one + 1; an explicit
        version sets it, e.g. the trainer's own policy version). Blocks until every live worker holds them.

        ``state_dict``: the full policy under the plain transformers model's names (no peft names, no shards).
        It is copied once into shared memory; each worker copies from there into its own model."""
        from toolgym.distributed import shared_weights

        if self.server is not None:
            raise RolloutPoolError("these workers sample from servers: weights go to the servers, versions here "
                                   "through label_version")
        packed = shared_weights.pack(state_dict)
        with self._lock:
            self.version = self.version + 1 if version is None else int(version)
            self._weights = packed  # a replacement worker starts from these
            self.stats.weight_pushes += 1
        return self._broadcast(packed)

    def label_version(self, version: int) -> int:
        """Workers that sample from servers: the servers hold policy ``version`` (at least) from now on, and
        groups that start after this record it. Blocks until every live worker took it."""
        with self._lock:
            self.version = int(version)
        return self._broadcast(None)

    def _broadcast(self, packed: Any) -> int:
        """Send the current version (and ``packed`` weights, or None) to every live worker; wait for them."""
        with self._lock:
            for s in self.slots:
                if s.state != "dead":
                    self._send(s, ("load", self.version, packed))
        while True:
            with self._lock:
                if all(s.state == "dead" or s.version == self.version for s in self.slots):
                    return self.version
            self._pump(self._wait_s())
            with self._lock:
                self._check_deadlines()

    def run(self, jobs: Sequence[GroupJob], on_result: Callable[[GroupJob, list[Any]], None] | None = None
            ) -> list[list[Any]]:
        """Run every job once; return the groups in job order. ``on_result`` sees each accepted group.

        One ``run`` at a time; ``push_weights`` may be called from another thread meanwhile."""
        keys = [j.key for j in jobs]
        if len(set(keys)) != len(keys):
            raise RolloutPoolError("two jobs share a (step, task index) key")
        queue: deque[GroupJob] = deque(jobs)
        results: dict[tuple[int, int], list[Any]] = {}
        mine: set[int] = set()
        with self._lock:
            self._suspects.clear()
        try:
            self._run(queue, results, mine, on_result)
        finally:  # an error or Ctrl-C: groups still out are the workers' to finish, and nobody's to collect
            with self._lock:
                self._abandoned |= mine
                for t in mine:
                    self._done.pop(t, None)
                self._requeue = [(t, j) for t, j in self._requeue if t not in mine]
        return [results[k] for k in keys]

    def _run(self, queue: deque[GroupJob], results: dict[tuple[int, int], list[Any]], mine: set[int],
             on_result: Callable[[GroupJob, list[Any]], None] | None) -> None:
        while queue or mine:
            with self._lock:
                lost = [(t, j) for t, j in self._requeue if t in mine]
                self._requeue = [(t, j) for t, j in self._requeue if t not in mine]
                for t, job in reversed(lost):
                    mine.discard(t)
                    queue.appendleft(job)
                self._fill(queue, mine)
                if not mine and queue and all(s.state == "dead" for s in self.slots):
                    raise RolloutPoolError("no live rollout worker can take work (replacements used up)")
            self._pump(self._wait_s())
            with self._lock:
                self._check_deadlines()
                finished = [(t, self._done.pop(t)) for t in sorted(mine) if t in self._done]
            for ticket, (kind, payload, job) in finished:
                mine.discard(ticket)
                if kind == "error":
                    raise RolloutPoolError(f"group {job.key} failed in its rollout worker: {payload}")
                if job.key in results:
                    self.stats.duplicates_dropped += 1
                    continue
                results[job.key] = payload
                self.stats.completed += 1
                if on_result is not None:
                    on_result(job, payload)

    def close(self) -> None:
        """Ask every worker to close its sandbox pool and exit; kill any still there after 30 s."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for s in self.slots:
                if s.state != "dead":
                    try:
                        s.conn.send(("close",))
                    except OSError:
                        pass
            end = time.monotonic() + 30
            for s in self.slots:
                if s.proc is not None:
                    s.proc.join(max(0.0, end - time.monotonic()))
                self._retire(s)
        self._spawner.shutdown(wait=False)

    def __enter__(self) -> LocalRolloutPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- workers ------------------------------------------------------------------------------------------

    def _spawn(self, s: _Slot) -> None:
        from toolgym.distributed._process_worker import child_main

        parent_conn, child_conn = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(target=child_main, name=f"toolgym-rollout-{s.index}", daemon=True,
                                 args=(s.index, child_conn, os.getpid(), self._config, self._tokenizer,
                                       self._worker_kw))
        with _main_hidden():
            self._spawner.submit(proc.start).result()
        child_conn.close()
        s.proc, s.conn, s.state, s.version, s.tickets = proc, parent_conn, "starting", -1, {}
        self._send(s, ("load", self.version, self._weights))

    def _retire(self, s: _Slot) -> None:
        """SIGKILL the slot's process if it still runs, and forget it."""
        if s.proc is not None:
            if s.proc.is_alive():
                try:
                    os.kill(s.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            s.proc.join(10)
        if s.conn is not None:
            s.conn.close()
        s.state = "dead"
        s.info_pending = False

    def _replace(self, s: _Slot) -> None:
        if self._closed or self.stats.replacements >= self.max_replacements:
            return
        self.stats.replacements += 1
        s.generation += 1
        self._spawn(s)  # from the current weights and version

    def _lose(self, s: _Slot) -> list[tuple[int, GroupJob]]:
        """End the slot's worker; its groups in flight, which the caller requeues or fails."""
        held = [(t, job) for t, (job, _) in s.tickets.items()]
        for t, _ in held:
            self._tickets.pop(t, None)
        s.tickets = {}
        self._retire(s)
        return held

    def _died(self, s: _Slot) -> None:
        """The worker ended by itself (OOM kill, kill -9, a crash): retry its groups on a replacement."""
        if s.state == "dead":
            return
        starting = s.state == "starting"
        self.stats.worker_deaths += 1
        lost = self._lose(s)
        code = s.proc.exitcode
        if starting and (code != -signal.SIGKILL or self.stats.replacements >= self.max_replacements):
            # an error in its start (not a kill) would repeat in a replacement
            raise RolloutPoolError(f"rollout worker {s.index} exited while starting (exit code {code}; its "
                                   "error is printed above)")
        for t, job in lost:
            if job.attempts >= self.max_attempts and t not in self._abandoned:
                raise RolloutPoolError(f"group {job.key} lost its worker {job.attempts} times; giving up")
            self._resubmit(t, job)
        self._replace(s)

    def _resubmit(self, ticket: int, job: GroupJob) -> None:
        if ticket in self._abandoned:
            self._abandoned.discard(ticket)
            return
        self._requeue.append((ticket, job))
        self.stats.resubmitted += 1

    def _settle(self, ticket: int, kind: str, payload: Any, job: GroupJob) -> None:
        if ticket in self._abandoned:
            self._abandoned.discard(ticket)
            return
        self._done[ticket] = (kind, payload, job)

    def _check_deadlines(self) -> None:
        """Kill each worker holding a group past its deadline: that group fails, the others go back."""
        if self.group_deadline_s <= 0:
            return
        now = time.monotonic()
        for s in self.slots:
            if s.state != "ready":
                continue
            overdue = {t for t, (_, t0) in s.tickets.items() if now - t0 >= self.group_deadline_s}
            if not overdue:
                continue
            self._drain(s)  # a result already in the pipe still counts
            overdue &= set(s.tickets)
            if not overdue or s.state == "dead":
                continue
            pid, version = s.proc.pid, s.version
            alone = len(s.tickets) == 1
            self.stats.deadline_kills += 1
            held = self._lose(s)
            for t, job in held:
                if t in overdue and alone:
                    self._suspects.discard(job.key)
                    self._settle(t, "failed", failed_group(job, self.group_deadline_s, s.index, pid, version), job)
                    self.stats.groups_failed += 1
                elif t in overdue:  # it shared the frozen process: run it again, alone
                    self._suspects.add(job.key)
            # the others first: a suspect takes a whole worker, and waits for one to be idle
            for t, job in sorted(held, key=lambda h: h[1].key in self._suspects):
                if not (t in overdue and alone):
                    job.attempts -= 1  # it reproduces from its seeds, and this attempt does not count
                    self._resubmit(t, job)
            self._replace(s)

    def _wait_s(self) -> float:
        """How long a pump may block: until the next group deadline, at most half a second."""
        wait = 0.5
        if self.group_deadline_s > 0:
            now = time.monotonic()
            with self._lock:
                for s in self.slots:
                    for _, t0 in s.tickets.values():
                        wait = min(wait, t0 + self.group_deadline_s - now)
        return max(0.0, wait)

    # -- messages -----------------------------------------------------------------------------------------

    def _slot_for(self, job: GroupJob) -> _Slot | None:
        """The least busy worker that may take ``job``: a suspect goes to an idle worker and takes it whole."""
        suspect = job.key in self._suspects
        free = [s for s in self.slots if s.state == "ready" and len(s.tickets) < (1 if suspect else self.max_in_flight)
                and not any(j.key in self._suspects for j, _ in s.tickets.values())]
        return min(free, key=lambda x: (len(x.tickets), x.index)) if free else None

    def _fill(self, queue: deque[GroupJob], mine: set[int]) -> None:
        while queue:
            # the first job that has a worker (a suspect waiting for an idle one lets the others pass)
            pick = next(((i, s) for i, j in enumerate(queue) if (s := self._slot_for(j)) is not None), None)
            if pick is None:
                return
            i, s = pick
            job = queue[i]
            del queue[i]
            ticket = self._next_ticket
            self._next_ticket += 1
            try:
                blob = pickle.dumps(job)
            except (pickle.PicklingError, AttributeError, TypeError) as exc:
                queue.insert(i, job)
                raise RolloutPoolError(f"group {job.key} cannot be sent to a worker process ({exc}); its env must "
                                       "be a registered id or a picklable callable (a module-level class or "
                                       "function, or functools.partial of one)") from None
            try:
                s.conn.send(("run", ticket, blob))
            except OSError:  # the worker is gone; the pump will see it
                queue.insert(i, job)
                self._died(s)
                continue
            job.attempts += 1
            s.tickets[ticket] = (job, time.monotonic())
            self._tickets[ticket] = (s.index, job)
            mine.add(ticket)
            self.stats.submitted += 1

    def _send(self, s: _Slot, msg: tuple[Any, ...]) -> None:
        try:
            s.conn.send(msg)
        except OSError:
            self._died(s)

    def _pump(self, timeout: float) -> None:
        """Wait up to ``timeout`` for any worker to say something or exit, then take in what arrived."""
        from multiprocessing.connection import wait

        with self._lock:
            live = [s for s in self.slots if s.state != "dead"]
            objs = {s.conn: (s, s.generation) for s in live}
            objs.update({s.proc.sentinel: (s, s.generation) for s in live})
        if not objs:
            time.sleep(min(timeout, 0.1))
            return
        try:
            ready = wait(list(objs), timeout)
        except (OSError, ValueError):  # another thread retired a worker meanwhile
            return
        with self._lock:
            for obj in ready:
                s, gen = objs[obj]
                if s.state == "dead" or s.generation != gen:
                    continue
                self._drain(s)
                if obj is s.proc.sentinel and s.state != "dead" and s.generation == gen:
                    self._died(s)  # exited with its pipe still open elsewhere

    def _drain(self, s: _Slot) -> None:
        try:
            while s.state != "dead" and s.conn.poll():
                self._handle(s, s.conn.recv())
        except (EOFError, OSError):
            self._died(s)

    def _handle(self, s: _Slot, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind in ("result", "error"):
            entry = self._tickets.pop(msg[1], None)
            s.tickets.pop(msg[1], None)
            if entry is not None:
                self._suspects.discard(entry[1].key)
                self._settle(msg[1], kind, msg[2], entry[1])
        elif kind == "ready":
            s.state, s.version, s.info = "ready", int(msg[1]["version"]), msg[1]
        elif kind == "loaded":
            s.version = int(msg[1])
        elif kind == "info":
            s.info, s.info_pending = msg[1], False
        elif kind == "init_failed":
            self._retire(s)
            raise RolloutPoolError(f"rollout worker {s.index} failed to start: {msg[1]}")
        elif kind == "load_failed":
            raise RolloutPoolError(f"rollout worker {s.index} could not load weights v{msg[1]}: {msg[2]}")


def failed_group(job: GroupJob, deadline_s: float, slot: int, pid: int | None, version: int) -> list[Any]:
    """``job.group_size`` episodes that failed as "worker_timeout": reward 0, left out of training."""
    from toolgym.agents.trajectory import Trajectory

    env_id = job.env if isinstance(job.env, str) else getattr(job.env, "__name__", "env")
    error = (f"its rollout worker (pid {pid}) ran past the group deadline of {deadline_s:g} s "
             "(rollout.group_deadline_s) and was killed: a hung environment, reward function or parser")
    return [Trajectory(task_id=f"task-{job.task_index}", group_id=f"{env_id}/{job.task_index}", prompt_ids=[],
                       finish_reason=WORKER_TIMEOUT, error=error,
                       metadata={"episode_index": g, "task_index": job.task_index, "worker": slot,
                                 "weights_version": version, "group_key": list(job.key)})
            for g in range(job.group_size)]


def _block_sigint() -> None:
    """The spawner thread blocks SIGINT, so a worker starts with it blocked until it ignores it (Ctrl-C
    during its imports must not kill it); the main thread still receives SIGINT."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})


_MAIN_LOCK = threading.Lock()


@contextlib.contextmanager
def _main_hidden() -> Iterator[None]:
    """Start a worker without it importing the parent's ``__main__``: a user's training script has no reason
    to guard its top level with ``if __name__ == "__main__"``, and a spawned child that re-imported it would
    start the training again. The worker needs nothing from it (environments come by id, ``module:id``
    included)."""
    main = sys.modules.get("__main__")
    with _MAIN_LOCK:
        saved = {k: main.__dict__[k] for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
        if main is not None:
            main.__dict__.pop("__file__", None)
            main.__spec__ = None  # read by multiprocessing.spawn without a default
        try:
            yield
        finally:
            if main is not None:
                main.__dict__.update(saved)
