"""Running `toolgym rollouts view` as a user does: its console script, in a process of its own."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .files import TOOLGYM


def view_out(path: Path, out: Path, *extra: str) -> str:
    """`toolgym rollouts view PATH --out OUT`; returns what it printed."""
    res = subprocess.run([TOOLGYM, "rollouts", "view", str(path), "--out", str(out), *extra],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    return res.stdout


@contextmanager
def serving(path: Path, *extra: str) -> Iterator[int]:
    """`toolgym rollouts view PATH --serve --port 0` until the block ends; yields the port it listens on."""
    proc = subprocess.Popen([TOOLGYM, "rollouts", "view", str(path), "--serve", "--port", "0", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert " at http://127.0.0.1:" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
        yield int(line.split("http://127.0.0.1:")[1].split("/")[0])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
