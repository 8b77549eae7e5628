"""`toolgym rollout` stopped by SIGINT or SIGTERM mid-run (a real signal once the episodes-done line is past the first group,
from a fresh folder as the user's cwd): the finished groups stay in the --out file, the sidecar says the file is
incomplete and how many episodes it holds, one line says so with the command, exit 128 + the signal."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from tests.stopping import signal_when, stop_line
from toolgym.agents.storage import group_by, read_header, read_jsonl

TASKS, GROUP = 32, 2


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_keeps_the_finished_groups_and_says_so(tiny_dir: Path, tmp_path: Path, signum: int) -> None:
    args = ["rollout", "toolgym/Arith-v0", "--model", str(tiny_dir), "--tasks", str(TASKS), "--group", str(GROUP),
            "--max-tokens", "32", "--max-turns", "2", "--concurrency", "2", "--out", "r.jsonl"]
    def past_a_group(line: str) -> bool:  # "episodes 7/64 ...": some whole group is written by now
        return line.startswith("episodes ") and int(line.split()[1].split("/")[0]) > GROUP

    rc, lines, sent = signal_when(args, tmp_path, past_a_group, signum)
    assert sent and rc == 128 + signum, "\n".join(lines[-30:])
    assert lines[0].startswith("loading the model: ")  # before the model loads, not after the first episode
    line = stop_line(lines)
    m = re.fullmatch(rf"stopped after (\d+) of {TASKS} groups \({signal.Signals(signum).name}\): (\d+) finished "
                     r"episodes in r\.jsonl; run again: toolgym (.*)", line)
    assert m, line
    groups, episodes = int(m.group(1)), int(m.group(2))
    assert 1 <= groups < TASKS and episodes == groups * GROUP
    assert m.group(3).split() == args
    trajs = read_jsonl(tmp_path / "r.jsonl")
    assert len(trajs) == episodes and all(len(g) == GROUP for g in group_by(trajs))
    meta = read_header(tmp_path / "r.jsonl")["meta"]
    assert meta["complete"] is False and meta["episodes"] == episodes
