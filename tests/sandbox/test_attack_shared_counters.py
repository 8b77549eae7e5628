"""Red-team attacks on kernel counters that survive a job (round 7, B06-B08; round 5, x04), on every
backend. Wiping a sandbox resets what a program can see, not the counters of its namespaces: the next pid,
the inode numbers of /tmp, the SysV IPC id sequence, and the host's per-uid counts. A solver that moves a
counter by its answer and a copier judged after it that reads it got AC computing nothing. Now no sandbox
lifetime serves two tenants of one key (toolgym.sandbox.tenancy), and two sandboxes share no per-uid count.
How these tests are built, and their round ids: tests/sandbox/judging.py.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.sandbox.conftest import backends
from tests.sandbox.judging import MEM, gather_batch
from toolgym.sandbox import tenancy
from toolgym.sandbox.judging import TestCase, ajudge

TESTS = [TestCase(input="", output="never printed\n")]  # one test set: solver and copier share its key
N = 300  # how far the solver moves each counter
NOISE = 30  # a fresh sandbox's own start-up moves a counter by a pid or two (docker): far below N


def independent(moved: int, quiet: int) -> bool:
    """The copier's reading does not carry the solver's N moves (before the fix it moved by N or more)."""
    return abs(moved - quiet) < NOISE

MOVE = {
    "pid": r'''
import os
for _ in range(N):
    p = os.fork()
    if p == 0:
        os._exit(0)
    os.waitpid(p, 0)
''',
    "tmp_inode": r'''
import os
for i in range(N):
    open(f"/tmp/.c{i}", "w").close()
    os.unlink(f"/tmp/.c{i}")
''',
    "sysv_ipc_id": r'''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
for _ in range(N):
    libc.shmctl(libc.shmget(0, 4096, 0o1600), 0, None)  # IPC_PRIVATE, IPC_CREAT | 0600; IPC_RMID
''',
}
READ = {
    "pid": "import os\nprint(os.getpid())\n",
    "tmp_inode": "import os\nopen('/tmp/.r', 'w').close()\nprint(os.stat('/tmp/.r').st_ino)\n",
    "sysv_ipc_id": "import ctypes\nlibc = ctypes.CDLL(None)\nprint(libc.shmget(0, 4096, 0o1600))\n",
}


def _solver(counter: str, moves: int) -> str:
    return f"N = {moves}\n" + MOVE[counter]


def _reading(report) -> int:
    (v,) = report.verdicts
    assert v.status == "WA", v  # the copier prints a counter, never the expected output
    return int(v.got)


async def _episode(coro):
    """The coroutine as one episode of the task (its own tenant)."""
    with tenancy.episode({"task": "counters"}):
        return await coro


async def _copier_after(sb, counter: str, moves: int, batched: bool) -> int:
    solver = _episode(ajudge(sb, _solver(counter, moves), TESTS, memory_mb=MEM))
    copier = _episode(ajudge(sb, READ[counter], TESTS, memory_mb=MEM))
    if batched:  # solver and copier submitted together: one micro-batch, before the fix
        _, report = await gather_batch(sb, solver, copier)
    else:  # one call after the other on a one-worker pool: one sandbox, before the fix
        await solver
        report = await copier
    return _reading(report)


@pytest.mark.parametrize("counter", [pytest.param(c, marks=pytest.mark.slow) if c == "pid" else c for c in sorted(MOVE)])
@pytest.mark.parametrize("batched", [True, False], ids=["same_call", "next_call"])
@backends(slow_on=("docker",))
async def test_a_counter_moved_by_a_solver_reads_the_same_for_a_copier(sb, counter, batched):
    """round 7, B06-B08."""
    quiet = await _copier_after(sb, counter, 0, batched)
    moved = await _copier_after(sb, counter, N, batched)
    assert independent(moved, quiet), f"{counter}: the copier read {moved} after a solver that moved it {N} times, {quiet} after one that did not"


@backends(slow_on=("docker",))
async def test_two_episodes_of_one_task_never_share_a_sandbox_through_tool_calls(sb):
    """round 7, B06-B08.

    Tool calls carry the episode's task: a copier's python call in another episode of the same task
    starts in a sandbox that the solver's episode never used; calls of one episode keep their sandbox."""
    async def episode(code: str) -> str:
        with tenancy.episode({"task": "counters"}):
            return (await sb.arun(code)).stdout

    async def copier_after(moves: int) -> int:
        await episode(_solver("pid", moves))
        return int(await episode(READ["pid"]))

    moved, quiet = await copier_after(N), await copier_after(0)
    assert independent(moved, quiet), (moved, quiet)
    retired = sb.stats()["retired"]
    with tenancy.episode({"task": "one episode"}):
        first = int((await sb.arun(READ["pid"])).stdout)
        await sb.arun(_solver("pid", 10))
        second = int((await sb.arun(READ["pid"])).stdout)
    assert second > first + 10 and sb.stats()["retired"] == retired, "one episode's calls share their sandbox"


@backends(slow_on=("docker",))
async def test_a_third_episode_cannot_relay_a_counter_between_two_episodes_of_one_task(sb, monkeypatch):
    """round 6, y01: R, an episode of another task, shares a sandbox with solver A and then with copier C (both
    of one task) and would move C's counter after reading A's. With TOOLGYM_TENANCY=transitive R carries A's
    task from their shared sandbox on (sandbox.tenancy), so it never enters C's sandbox."""
    monkeypatch.setenv("TOOLGYM_TENANCY", "transitive")
    a, r, c = (tenancy.new_episode({"task": t}) for t in ("counters", "relay", "counters"))

    async def call(ep, code: str) -> str:
        with tenancy.within(ep):
            return (await sb.arun(code)).stdout

    await call(a, _solver("pid", N))
    await call(r, READ["pid"])  # R reads, in A's sandbox, what A moved
    before = int(await call(c, READ["pid"]))  # C, in a sandbox of its own
    await call(r, _solver("pid", N))  # R moves it again: in C's sandbox, before the fix
    after = int(await call(c, READ["pid"]))
    assert after - before < N // 2, f"C's counter moved by {after - before} after R's {N} moves: R relayed"


@pytest.mark.slow
async def test_jobs_of_one_task_from_many_episodes_are_all_judged(sb):
    """round 7, B06-B08.

    A GRPO group: eight episodes submit the same tests at once; the one-worker pool serves each in a
    sandbox lifetime of its own, and every verdict is right."""
    right = "print(input())"

    async def one(g: int):
        with tenancy.episode({"task": "echo"}):
            return await ajudge(sb, right if g % 2 else "print('no')", [TestCase(input="7\n", output="7\n")],
                                memory_mb=MEM)

    before = sb.stats()["retired"]
    reports = await asyncio.gather(*(one(g) for g in range(8)))
    assert [r.all_passed for r in reports] == [bool(g % 2) for g in range(8)]
    assert sb.stats()["retired"] - before >= 7


# ------------------------------------------------------------ the host's per-uid counts (round 5, x04)
INOTIFY_MAX = int(open("/proc/sys/fs/inotify/max_user_instances").read())
HOLD = r'''
import ctypes, os, time
libc = ctypes.CDLL(None)
fds = [libc.inotify_init1(0) for _ in range(N)]
print(sum(fd >= 0 for fd in fds), os.getuid(), flush=True)
time.sleep(4)
'''
COUNT = r'''
import ctypes, os, time
time.sleep(1.5)
libc = ctypes.CDLL(None)
n = 0
while n < 4096 and libc.inotify_init1(0) >= 0:
    n += 1
print(n, os.getuid())
'''


@pytest.mark.slow
async def test_programs_in_two_sandboxes_share_no_per_uid_count_of_the_host(backend):
    """round 7, x04.

    The host kernel counts inotify instances (and message-queue bytes, pipe pages, processes) per uid.
    With one uid for every sandbox, a solver holding N instances left a copier judged at the same time in
    another sandbox exactly max - N (AC through the count, both backends). Each sandbox now has uids of its
    own: the copier can make as many as the host allows one uid, whatever the solver holds."""
    from tests.sandbox.conftest import open_for
    from toolgym.sandbox import Limits

    held = INOTIFY_MAX // 2 + 7
    with open_for(backend, Limits(timeout_s=10, memory_mb=256, pids=64), pool_size=2) as two:
        two.wait_ready(120)
        solver, copier = await asyncio.gather(two.arun(f"N = {held}\n" + HOLD), two.arun(COUNT))
    (held_n, solver_uid), (made, copier_uid) = (map(int, r.stdout.split()) for r in (solver, copier))
    assert solver_uid != copier_uid  # each sandbox's own
    if backend == "local":  # no watch on a file can be set there at all (the host's /usr is shared by inode)
        assert held_n == made == 0, (solver.stdout, copier.stdout)
        return
    assert held_n == held, solver
    assert made >= INOTIFY_MAX - 2, (copier.stdout, INOTIFY_MAX, held)
