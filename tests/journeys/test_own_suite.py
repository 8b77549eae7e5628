"""Journey (c): a suite YAML of your own over local JSONL files, run with the `toolgym` command, interrupted
(Ctrl-C) in its second entry, resumed by the same command, and compared with `toolgym bench compare` against a
run that was never interrupted."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from tests.journeys.user import BIN, User

SUITE = """\
name: my-math
description: two files of our own
entries:
  - {name: first, env: toolgym/MathTIR-v0, source: "aime:./first.jsonl", metric: avg@1}
  - {name: second, env: toolgym/MathTIR-v0, source: "aime:./second.jsonl", metric: avg@1}
"""


def _problems(offset: int) -> str:
    rows = [{"id": f"p{offset + i}", "problem": f"What is {offset + i} + {i + 2}? Answer in \\\\boxed{{}}.",
             "answer": offset + 2 * i + 2} for i in range(4)]
    return "".join(json.dumps(r) + "\n" for r in rows)


def _bench(out: str) -> list[str]:
    return [str(BIN / "toolgym"), "bench", "run", "my-suite.yaml", "--model", "smollm2-135m-instruct",
            "--max-tokens", "48", "--batch", "1", "--out", out]


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_own_suite_interrupted_resumed_and_compared(tmp_path: Path) -> None:
    user = User(tmp_path / "home")
    user.write("my-suite.yaml", SUITE)
    user.write("first.jsonl", _problems(10))
    user.write("second.jsonl", _problems(20))

    # run, and press Ctrl-C once the second entry has started
    proc = subprocess.Popen(_bench("runs/a"), cwd=user.home, env=user.env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    seen: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("- second:"):
            proc.send_signal(signal.SIGINT)
            break
    rest = proc.communicate(timeout=600)[0]
    assert proc.returncode != 0, "".join(seen) + rest
    partial = json.loads((user.home / "runs/a/report.json").read_text())
    assert partial.get("partial") is True
    assert len(partial["entries"]["first"]["task_scores"]) == 4  # what was done is kept
    assert len(partial["entries"].get("second", {}).get("task_scores", {})) < 4

    # the same command resumes: finished tasks are not run again
    resumed = subprocess.run(_bench("runs/a"), cwd=user.home, env=user.env, capture_output=True, text=True,
                             timeout=900, stdin=subprocess.DEVNULL)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "- first: 4 tasks, 4 already done" in resumed.stdout + resumed.stderr
    report = json.loads((user.home / "runs/a/report.json").read_text())
    assert not report.get("partial")
    assert {e: len(v["task_scores"]) for e, v in report["entries"].items()} == {"first": 4, "second": 4}

    # an uninterrupted run of the same suite, and the comparison of the two on the tasks they share
    user.run(*_bench("runs/b"))
    cmp = json.loads(user.run("toolgym", "bench", "compare", "runs/a", "runs/b", "--json").stdout)
    rows = {r["entry"]: r for r in cmp["entries"]}
    assert set(rows) == {"first", "second"}
    assert all(r["n"] == 4 for r in rows.values()), rows
