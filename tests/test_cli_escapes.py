"""Printed model and program text cannot drive the terminal (issue 36): `toolgym rollouts show`, error lines
and log records render control characters visibly, on a pseudo-terminal and through a pipe. The rollout
file is a real one, written by the project's writer, holding the red team's sequences."""

from __future__ import annotations

import logging
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

from toolgym.agents.storage import write_jsonl
from toolgym.agents.trajectory import Trajectory

TOOLGYM = str(Path(sys.executable).parent / "toolgym")  # the installed console script
OSC52 = "\x1b]52;c;cm0gLXJmIH4K\x07"  # a clipboard write ("rm -rf ~")
TITLE = "\x1b]0;owned\x07"  # a window title
FORGE = "\x1b[1A\x1b[2K\r== t0  group g0  episode 0  reward 1  finish answer"  # cursor up, erase, a fake header
C1 = "\x9b2J\x9d0;t\x9c"  # 8-bit CSI (erase the screen) and OSC
SGR = re.compile(r"\x1b\[[0-9;]*m")  # the command's own bold and red, added after escaping
RAW = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # any control character but tab and newline


def _file(tmp_path: Path) -> Path:
    t = Trajectory(task_id="t0" + TITLE, group_id="g0", prompt_ids=[1], reward=0.0, reward_breakdown={"correct" + C1: 0.0},
                   turns=[{"role": "user", "content": "2+2?"},
                          {"role": "assistant", "content": "4" + OSC52 + FORGE,
                           "tool_calls": [{"function": {"name": "python" + C1, "arguments": {"code": "print(1)" + OSC52}}}]},
                          {"role": "tool", "content": "out\x08\x08\x08\x1b[31mred" + C1}],
                   finish_reason="answer", error="boom" + TITLE + "\x07", metadata={"episode_index": 0})
    path = tmp_path / "r.jsonl"
    write_jsonl(path, [t], meta={"env_id": "toolgym/Arith-v0" + TITLE, "model": "m", "sampler": "hf"})
    return path


def _on_pty(args: list[str]) -> str:
    """The command's whole output (stdout and stderr) as a terminal receives it."""
    main, sub = pty.openpty()
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=sub, stderr=sub, env={**os.environ, "TERM": "xterm"})
    os.close(sub)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # EIO: the child closed its side
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(main)
    return b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


def _assert_inert(out: str) -> None:
    assert not RAW.search(SGR.sub("", out)), ascii(RAW.findall(SGR.sub("", out)))
    assert "\\x1b]52;c;" in out and "\\x1b[1A\\x1b[2K\\x0d" in out and "\\x9b2J" in out  # shown, not run
    assert out.count("reward 1") == 1 and "\n== t0" not in out.replace("== t0\\x1b", "")  # no header forged


def test_rollouts_show_on_a_terminal_prints_escapes_visibly(tmp_path):
    out = _on_pty([TOOLGYM, "rollouts", "show", str(_file(tmp_path))])
    assert "\x1b[1m" in out  # a terminal: the header is bold, so the styling survived and was told apart
    _assert_inert(out)


def test_rollouts_show_through_a_pipe_prints_no_control_character(tmp_path):
    res = subprocess.run([TOOLGYM, "rollouts", "show", str(_file(tmp_path)), "--full"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert not RAW.search(res.stdout + res.stderr)
    _assert_inert(res.stdout)


def test_an_error_line_quoting_a_hostile_name_is_inert(tmp_path):
    bad = tmp_path / ("nope" + OSC52 + ".jsonl")
    res = subprocess.run([TOOLGYM, "rollouts", "show", str(bad)], capture_output=True, text=True)
    assert res.returncode != 0 and res.stderr.startswith("error:")
    assert not RAW.search(res.stderr) and "\\x1b]52;c;" in res.stderr
    out = _on_pty([TOOLGYM, "rollouts", "show", str(bad)])
    assert not RAW.search(SGR.sub("", out)) and "\\x1b]52;c;" in out


def test_log_records_are_inert():
    from toolgym._cli.logs import _Format

    rec = logging.LogRecord("toolgym.x", logging.WARNING, __file__, 1, "tool said %s", ("hi" + OSC52 + FORGE,), None)
    line = _Format().format(rec)
    assert not RAW.search(line) and line.startswith("warning: toolgym.x: tool said hi\\x1b]52;")


def test_printable_leaves_text_tabs_and_newlines_and_renders_every_other_control():
    from toolgym._text import printable

    assert printable("é ✓ \u2028 a\tb\nc") == "é ✓ \u2028 a\tb\nc"
    for c in [*range(0x20), *range(0x7F, 0xA0)]:
        if chr(c) not in "\t\n":
            assert printable(chr(c)) == f"\\x{c:02x}"
