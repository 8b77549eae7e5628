"""Run a `toolgym` command as a user does, wait for a line it prints, send it a real signal, collect the rest.

Used by the SIGINT/SIGTERM tests of train, rollout and bench: the signal goes once the command has shown the
given progress line (never after a sleep), so it lands mid-run."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

TOOLGYM = str(Path(sys.executable).parent / "toolgym")  # the installed console script


def signal_when(args: Sequence[str], cwd: Path, ready: Callable[[str], bool], signum: int,
                timeout: float = 600, env: dict[str, str] | None = None) -> tuple[int, list[str], bool]:
    """Run ``toolgym ARGS`` in ``cwd`` (stdout and stderr together); send ``signum`` after the first line for which
    ``ready`` is true. Returns (exit code, every line, whether the signal was sent)."""
    p = subprocess.Popen([TOOLGYM, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         bufsize=1, env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    lines: list[str] = []
    sent = False
    try:
        assert p.stdout is not None
        for line in p.stdout:
            lines.append(line.rstrip("\n"))
            if not sent and ready(lines[-1]):
                p.send_signal(signum)
                sent = True
        rc = p.wait(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return rc, lines, sent


def run(args: Sequence[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([TOOLGYM, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


def stop_line(lines: list[str]) -> str:
    """The one line a stopped command prints (fails unless there is exactly one)."""
    found = [x for x in lines if x.startswith("stopped ")]
    assert len(found) == 1, "\n".join(lines[-30:])
    return found[0]


def resume_args(line: str) -> list[str]:
    """The arguments of the `resume:` (or `run again:`) command in a stop line, without the leading `toolgym`."""
    cmd = shlex.split(line.rsplit(": ", 1)[1])
    assert cmd[0] == "toolgym", line
    return cmd[1:]
