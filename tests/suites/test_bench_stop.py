"""`toolgym bench` stopped by SIGINT or SIGTERM mid-run (a real signal once the first chunk's done line is out, from
a fresh folder as the user's cwd): a partial report is written, one line gives the resume command, exit 128 + the
signal; that command finishes the run without redoing the finished tasks."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest

from tests.stopping import resume_args, run, signal_when, stop_line

N = 24


def _suite(cwd: Path) -> None:
    (cwd / "q.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "question": f"What is {i} + 1?",
                                                     "answer": str(i + 1)}) + "\n" for i in range(N)))
    (cwd / "s.yaml").write_text("name: s\nentries:\n  - name: m\n    env: toolgym/MathTIR-v0\n    source: 'asset:q.jsonl'\n"
                                "    metric: pass@1\n    options: {dataset: gsm8k}\n")


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_writes_a_partial_report_and_the_printed_command_resumes(tiny_dir: Path, tmp_path: Path,
                                                                        signum: int) -> None:
    _suite(tmp_path)
    args = ["bench", "s.yaml", "--model", str(tiny_dir), "--max-tokens", "48", "--batch", "1", "--out", "out"]
    rc, lines, sent = signal_when(args, tmp_path, lambda x: re.match(rf"  m: [1-9]\d*/{N} done", x) is not None,
                                  signum)
    assert sent and rc == 128 + signum, "\n".join(lines[-30:])
    order = [next(i for i, x in enumerate(lines) if x.startswith(p))
             for p in ("- m: loading tasks", "  loading the model: ", f"  m: 0/{N} done", "  m: 8/")]
    assert order == sorted(order), lines  # what it does shows before the model is loaded and the first answer
    line = stop_line(lines)
    name = signal.Signals(signum).name
    assert line == f"stopped ({name}): partial report in out/report.md; resume: toolgym {' '.join(args)}"
    part = json.loads((tmp_path / "out" / "report.json").read_text())
    assert part["partial"] is True
    done = part["entries"]["m"]["n"]
    assert 8 <= done < N

    res = run(resume_args(line), tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"- m: {N} tasks, {done} already done" in res.stdout
    full = json.loads((tmp_path / "out" / "report.json").read_text())
    assert "partial" not in full and full["entries"]["m"]["n"] == N
