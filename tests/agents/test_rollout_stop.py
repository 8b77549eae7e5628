"""`toolgym rollout` stopped by SIGINT or SIGTERM mid-run (a real signal once the episodes-done line is past the first group,
from a fresh folder as the user's cwd): the finished groups stay in the --out file, the sidecar says the file is
incomplete and how many episodes it holds, one line says so with the resume command, exit 128 + the signal; that
command samples only the missing groups, each under its own task index (its task, group id and seeds)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
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

    # a progress line per episode (TOOLGYM_PROGRESS_EVERY_S=0), so the signal lands just past the first group
    # however fast the machine (with a line every 5 s a quiet machine finished every group in between)
    rc, lines, sent = signal_when(args, tmp_path, past_a_group, signum, env={"TOOLGYM_PROGRESS_EVERY_S": "0"})
    assert sent and rc == 128 + signum, "\n".join(lines[-30:])
    assert lines[0].startswith("loading the model: ")  # before the model loads, not after the first episode
    line = stop_line(lines)
    m = re.fullmatch(rf"stopped after (\d+) of {TASKS} groups \({signal.Signals(signum).name}\): (\d+) finished "
                     r"episodes in r\.jsonl; resume: toolgym (.*)", line)
    assert m, line
    groups, episodes = int(m.group(1)), int(m.group(2))
    assert 1 <= groups < TASKS and episodes == groups * GROUP
    assert m.group(3).split() == [*args, "--resume"]
    trajs = read_jsonl(tmp_path / "r.jsonl")
    assert len(trajs) == episodes and all(len(g) == GROUP for g in group_by(trajs))
    meta = read_header(tmp_path / "r.jsonl")["meta"]
    assert meta["complete"] is False and meta["episodes"] == episodes
    kept = {t.metadata["task_index"]: t.task_id for t in trajs}

    resumed = subprocess.run([str(Path(sys.executable).parent / "toolgym"), *m.group(3).split()], cwd=tmp_path,
                             capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming: {groups} of {TASKS} groups are in r.jsonl already" in resumed.stderr
    whole = read_jsonl(tmp_path / "r.jsonl")
    by_index = {g[0].metadata["task_index"]: g for g in group_by(whole)}
    assert sorted(by_index) == list(range(TASKS)) and all(len(g) == GROUP for g in by_index.values())
    assert len(whole) == TASKS * GROUP  # nothing sampled twice
    assert all(by_index[i][0].task_id == task_id for i, task_id in kept.items())  # the kept groups untouched
    for i, g in by_index.items():  # each group is its own index's: Arith's task for options.index i
        assert {t.group_id for t in g} == {f"toolgym/Arith-v0/{i}"}
    meta = read_header(tmp_path / "r.jsonl")["meta"]
    assert meta["complete"] is True and meta["episodes"] == TASKS * GROUP


def test_a_signal_between_writing_a_group_and_counting_it_leaves_both_in_step(tiny_dir: Path, tmp_path: Path) -> None:
    """The moment the SIGINT test once lost under load: a signal just after a group reached the file, before the
    tally counted it, made the stop line say 1 group where the file held 2. A stand-in for that timing (named as
    such): the real CLI runs with the writer patched to send the signal from inside its write, the one moment
    real timing seldom hits."""
    script = (
        "import os, signal, sys\n"
        "from toolgym.agents import storage\n"
        "real = storage.RolloutWriter.write\n"
        "def write_then_signal(self, trajs):\n"
        "    real(self, trajs)\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "storage.RolloutWriter.write = write_then_signal\n"
        "from toolgym.cli import main\n"
        "sys.argv = ['toolgym', *sys.argv[1:]]\n"
        "main()\n")
    args = ["rollout", "toolgym/Arith-v0", "--model", str(tiny_dir), "--tasks", "4", "--group", "2",
            "--max-tokens", "8", "--max-turns", "1", "--concurrency", "1", "--out", "r.jsonl", "--no-progress"]
    res = subprocess.run([sys.executable, "-c", script, *args], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, stdin=subprocess.DEVNULL)
    assert res.returncode == 128 + signal.SIGINT, res.stderr[-3000:]
    assert "stopped after 1 of 4 groups (SIGINT): 2 finished episodes in r.jsonl" in res.stderr, res.stderr[-3000:]
    assert len(read_jsonl(tmp_path / "r.jsonl")) == 2 and read_header(tmp_path / "r.jsonl")["meta"]["episodes"] == 2
