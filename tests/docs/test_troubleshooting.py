"""The troubleshooting page quotes real lines: each of its `console` blocks is run as shown, in a fresh folder,
and the last command's last line of output must be the line the page prints (`...` there stands for a tail left
out), with a non-zero exit status."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .test_commands import _workdir

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "troubleshooting.md"


def console_blocks(text: str) -> list[tuple[int, list[str], str]]:
    """(line number, commands, expected last line) of every ```console block."""
    found = []
    for m in re.finditer(r"^```console\n(.*?)^```", text, re.S | re.M):
        lines = m.group(1).rstrip("\n").splitlines()
        commands = [line[2:] for line in lines if line.startswith("$ ")]
        shown = [line for line in lines if not line.startswith("$ ")]
        found.append((text[: m.start()].count("\n") + 1, commands, shown[-1] if shown else ""))
    return found


def matches(shown: str, printed: str) -> bool:
    pattern = ".*".join(re.escape(part) for part in shown.split("..."))
    return re.fullmatch(pattern, printed) is not None


def test_the_wildcard_stands_for_a_tail_only_where_written() -> None:
    assert matches("error: unknown key 'a'; allowed: ...", "error: unknown key 'a'; allowed: b, c")
    assert not matches("error: unknown key 'a'", "error: unknown key 'a'; allowed: b, c")
    assert not matches("error: x", "error: y")


BLOCKS = console_blocks(PAGE.read_text())


def test_the_page_has_runnable_entries_and_each_shows_one_error_line() -> None:
    assert len(BLOCKS) >= 12
    for line, commands, shown in BLOCKS:
        assert commands and commands[-1].split()[0] in ("toolgym", "HF_HUB_OFFLINE=1", "DOCKER_HOST=unix:///nonexistent.sock"), line
        assert shown.startswith("error: "), f"troubleshooting.md:{line}: an entry shows the error line it prints"


@pytest.mark.parametrize(("line", "commands", "shown"), BLOCKS, ids=[f"line{b[0]}" for b in BLOCKS])
def test_each_quoted_error_is_what_the_command_prints(line: int, commands: list[str], shown: str,
                                                      tmp_path: Path) -> None:
    work = _workdir(tmp_path / "work")
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for setup in commands[:-1]:
        subprocess.run(["bash", "-c", setup], cwd=work, env=env, check=True, timeout=60)
    proc = subprocess.run(["bash", "-c", commands[-1]], cwd=work, env=env, capture_output=True, text=True,
                          timeout=300)
    printed = [x for x in (proc.stdout + proc.stderr).splitlines() if x.strip()]
    assert proc.returncode != 0, f"troubleshooting.md:{line}: `{commands[-1]}` succeeded"
    assert printed and matches(shown, printed[-1]), (
        f"troubleshooting.md:{line}: `{commands[-1]}` printed\n{printed[-1] if printed else '(nothing)'}\n"
        f"where the page shows\n{shown}")
