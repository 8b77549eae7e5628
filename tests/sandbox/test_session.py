"""Stateful sessions (notebook-like cells) and the asyncio API, on both backends."""

from __future__ import annotations

import asyncio

import pytest

from toolgym.sandbox import Limits


def test_variables_survive_between_cells(sb):
    with sb.session() as s:
        assert s.run("x = 2\ndef f(y):\n    return x * y").status == "ok"
        r = s.run("print(x + 1, f(5))")
        assert (r.status, r.stdout) == ("ok", "3 10\n")
        r = s.run("import sys\nprint(sys.stdin.read())", stdin="cell input")
        assert r.stdout == "cell input\n"
        assert not s.state_lost


def test_errors_keep_state_and_reset_forgets(sb):
    with sb.session() as s:
        s.run("keep = 'me'")
        r = s.run("1 / 0")
        assert r.status == "error" and "ZeroDivisionError" in r.stderr
        assert s.run("print(keep)").stdout == "me\n"
        s.reset()
        r = s.run("print(keep)")
        assert r.status == "error" and "NameError" in r.stderr


@pytest.mark.slow
def test_timeout_kills_the_interpreter_and_reports_lost_state(sb):
    with sb.session() as s:
        s.run("counter = 41")
        r = s.run("while True:\n    pass", limits=Limits(timeout_s=1))
        assert r.status == "timeout" and s.state_lost and "state was lost" in r.stderr
        r = s.run("print(counter)")
        assert r.status == "error" and "NameError" in r.stderr
        assert s.run("print('fresh')").stdout == "fresh\n" and not s.state_lost


def test_session_output_and_memory_limits(sb):
    with sb.session() as s:
        r = s.run("print('z' * 10**6)")
        assert r.status == "output_limit" and r.stdout_truncated
        r = s.run("x = bytearray(10 ** 10)")
        assert r.status == "oom", r
        assert s.run("print('alive')").stdout == "alive\n"


def test_os_exit_in_a_cell_restarts(sb):
    with sb.session() as s:
        s.run("v = 1")
        r = s.run("import os\nos._exit(4)")
        assert s.state_lost and r.status != "ok"
        assert s.run("print('again')").stdout == "again\n"


async def test_arun_does_not_block_the_loop(sb):
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    task = asyncio.create_task(ticker())
    results = await asyncio.gather(*(sb.arun(f"import time\ntime.sleep(0.2)\nprint({i})") for i in range(3)))
    task.cancel()
    assert [r.stdout for r in results] == ["0\n", "1\n", "2\n"]
    assert ticks >= 5  # the loop kept running while the calls waited


async def test_session_arun(sb):
    with sb.session() as s:
        await s.arun("a = 5")
        r = await s.arun("print(a * 2)")
        assert r.stdout == "10\n"


@pytest.mark.slow
def test_cpu_limit_applies_per_cell(sb):
    with sb.session() as s:
        s.run("y = 1")
        r = s.run("while True:\n    pass", limits=Limits(timeout_s=30, cpu_s=1))
        assert r.status == "timeout" and r.duration_s < 20 and s.state_lost
