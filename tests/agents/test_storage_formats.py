"""Rollout files for other tools: plain JSONL + sidecar read by pandas and `datasets`, old files with a
header line still read, Parquet round-trips, `toolgym rollouts export`, and a killed `toolgym rollout`
keeps the groups it finished."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.requirements import need
from toolgym.agents.storage import (
    RolloutFileError,
    RolloutWriter,
    meta_path,
    read_header,
    read_jsonl,
    write_jsonl,
)
from toolgym.agents.trajectory import SCHEMA_VERSION, Trajectory

TOOLGYM = str(Path(sys.executable).parent / "toolgym")


def _mixed() -> list[Trajectory]:
    """Rows whose free-form parts differ the way real runs do: tool calls, a None content, an error row."""
    ok = Trajectory(task_id="t0", group_id="g0", prompt_ids=[1, 2], response_ids=[3, 4, 5], loss_mask=[1, 0, 1],
                    behavior_logprobs=[-0.1 / 3, 0.0, -math.pi], reward=1.0, reward_breakdown={"correct": 1.0},
                    turns=[{"role": "user", "content": "é ✓ \u2028"},
                           {"role": "assistant", "content": None, "finish_reason": "stop",
                            "tool_calls": [{"function": {"name": "python", "arguments": {"code": "print(1)"}}}]},
                           {"role": "tool", "content": "1\n", "name": "python"}],
                    finish_reason="answer", timings={"total_s": 0.25},
                    metadata={"episode_index": 0, "env_info": {"answer": "1", "tool_calls_total": 1}},
                    token_versions=[3, 3, 4])
    bad = Trajectory(task_id="t0", group_id="g0", prompt_ids=[1, 2], reward=0.0, finish_reason="error",
                     error="sandbox_error: gone", turns=[{"role": "user", "content": "x"}],
                     metadata={"episode_index": 1, "traceback": "Traceback ...", "prompt_truncated_from": 9})
    return [ok, bad]


def test_jsonl_has_no_header_line_and_the_sidecar_has_the_meta(tmp_path):
    path = tmp_path / "r.jsonl"
    write_jsonl(path, _mixed(), meta={"env_id": "toolgym/Arith-v0"})
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2 and all("task_id" in json.loads(x) for x in lines)
    side = json.loads(meta_path(path).read_text())
    assert side == {"kind": "toolgym.rollouts", "schema_version": SCHEMA_VERSION, "meta": {"env_id": "toolgym/Arith-v0"}}
    assert read_header(path) == side and read_jsonl(path) == _mixed()


def test_pandas_and_datasets_read_the_file_as_is(tmp_path, monkeypatch):
    try:
        import datasets
        import pandas as pd
    except ImportError:
        need(False, "pandas and datasets are not installed (toolgym[dev])")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    path = tmp_path / "r.jsonl"
    write_jsonl(path, _mixed(), meta={"env_id": "x"})
    df = pd.read_json(path, lines=True)
    assert list(df["task_id"]) == ["t0", "t0"] and list(df["reward"]) == [1.0, 0.0]
    assert df["behavior_logprobs"][0] == pytest.approx([-0.1 / 3, 0.0, -math.pi], rel=1e-14)  # pandas' fast parser
    exact = pd.read_json(path, lines=True, precise_float=True)
    assert exact["behavior_logprobs"][0] == [-0.1 / 3, 0.0, -math.pi]
    ds = datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache"))
    assert ds.num_rows == 2 and ds["response_ids"][0] == [3, 4, 5] and ds["error"] == [None, "sandbox_error: gone"]
    # rows whose nested fields differ make `datasets` re-encode the lines with pandas' ujson (10 decimals)
    assert ds["behavior_logprobs"][0] == pytest.approx([-0.1 / 3, 0.0, -math.pi], abs=1e-10)
    assert ds["turns"][0][1]["tool_calls"][0]["function"]["arguments"] == {"code": "print(1)"}


def test_old_files_with_a_header_line_still_read(tmp_path):
    old = tmp_path / "old.jsonl"
    header = {"kind": "toolgym.rollouts", "schema_version": SCHEMA_VERSION, "meta": {"env_id": "e"}}
    old.write_text(json.dumps(header) + "\n" + "".join(t.to_json() + "\n" for t in _mixed()), encoding="utf-8")
    assert read_jsonl(old) == _mixed() and read_header(old)["meta"] == {"env_id": "e"}
    res = CliRunner().invoke(_app(), ["rollouts", "export", str(old), "--format", "jsonl", "--out",
                                      str(tmp_path / "new.jsonl")])
    assert res.exit_code == 0, res.output
    new = tmp_path / "new.jsonl"
    assert "toolgym.rollouts" not in new.read_text() and read_header(new)["meta"] == {"env_id": "e"}
    assert read_jsonl(new) == _mixed()


def test_a_newer_sidecar_is_refused(tmp_path):
    path = tmp_path / "r.jsonl"
    write_jsonl(path, _mixed())
    meta_path(path).write_text(json.dumps({"kind": "toolgym.rollouts", "schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(RolloutFileError, match="newer"):
        read_jsonl(path)
    meta_path(path).write_text("{oops")
    with pytest.raises(RolloutFileError, match="meta.json"):
        read_header(path)


def test_parquet_round_trips_and_pandas_reads_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    try:
        import pandas as pd
        import pyarrow  # noqa: F401
    except ImportError:
        need(False, "pandas and pyarrow are not installed (toolgym[dev], toolgym[tasks])")

    from toolgym.agents.parquet import read_parquet, read_parquet_header, write_parquet

    path = tmp_path / "r.parquet"
    assert write_parquet(path, _mixed(), meta={"env_id": "e"}) == 2
    assert read_parquet(path) == _mixed()  # every field, floats bit-for-bit, turns with their tool calls
    assert read_parquet_header(path)["meta"] == {"env_id": "e"}
    df = pd.read_parquet(path)
    assert list(df["reward"]) == [1.0, 0.0] and list(df["response_ids"][0]) == [3, 4, 5]
    assert [t["role"] for t in df["turns"][0]] == ["user", "assistant", "tool"]
    try:
        import datasets
    except ImportError:
        need(False, "datasets is not installed (toolgym[dev])")
    ds = datasets.load_dataset("parquet", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache"))
    assert ds["behavior_logprobs"][0] == [-0.1 / 3, 0.0, -math.pi]  # Parquet keeps them bit-exact


def test_export_cli_writes_parquet_and_refuses_bad_input(tmp_path):
    from toolgym.agents.parquet import read_parquet

    src = tmp_path / "r.jsonl"
    write_jsonl(src, _mixed(), meta={"env_id": "e"})
    res = CliRunner().invoke(_app(), ["rollouts", "export", str(src), "--format", "parquet",
                                      "--out", str(tmp_path / "r.parquet")])
    assert res.exit_code == 0 and "wrote 2 episodes" in res.output
    assert read_parquet(tmp_path / "r.parquet") == _mixed()
    out = subprocess.run([TOOLGYM, "rollouts", "export", str(src), "--format", "csv", "--out", str(tmp_path / "x")],
                         capture_output=True, text=True)
    assert out.returncode != 0 and out.stderr.startswith("error:") and "--format" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_writer_appends_whole_groups(tmp_path):
    path = tmp_path / "r.jsonl"
    with RolloutWriter(path, meta={"run": 1}) as w:
        w.write(_mixed()[:1])
        assert read_jsonl(path) == _mixed()[:1]  # readable while the run goes on
        w.write(_mixed()[1:])
    assert read_jsonl(path) == _mixed() and read_header(path)["meta"] == {"run": 1}


def test_a_lone_surrogate_in_a_trajectory_is_written_and_reads_back(tmp_path):
    """A program's text (or its output) may hold a lone surrogate, which UTF-8 cannot encode: before, both
    writers raised UnicodeEncodeError and the run lost the group."""
    odd = Trajectory(task_id="t\ud800", group_id="g0", prompt_ids=[1], response_ids=[2], loss_mask=[1],
                     behavior_logprobs=[-0.5], reward=0.0,
                     turns=[{"role": "assistant", "content": "s = '\ud800' \U0001f600 \udfff"}])
    path = tmp_path / "r.jsonl"
    assert write_jsonl(path, [odd]) == 1
    assert read_jsonl(path) == [odd]
    with RolloutWriter(tmp_path / "w.jsonl") as w:
        w.write([odd, *_mixed()])
    assert read_jsonl(tmp_path / "w.jsonl") == [odd, *_mixed()]


def test_a_lone_surrogate_reaches_parquet_too(tmp_path):
    """Round-5 red team x09: a turn holding a lone surrogate (in its content, in a tool name, in the
    metadata) made write_parquet raise UnicodeEncodeError. Turns and metadata now read back exactly;
    a plain text column (the task id) is written with the surrogate escaped."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        need(False, "pyarrow is not installed (toolgym[tasks])")
    from toolgym.agents.parquet import read_parquet, write_parquet

    odd = Trajectory(task_id="t0", group_id="g0", prompt_ids=[1], response_ids=[2], loss_mask=[1],
                     behavior_logprobs=[-0.5], reward=0.0, error="bad \udc80 byte",
                     turns=[{"role": "assistant", "content": "s = '\ud800' \U0001f600 \udfff"},
                            {"role": "tool", "name": "\ud800", "content": "ok"}],
                     metadata={"feedback": "\udfff", "\ud801": 1})
    path = tmp_path / "r.parquet"
    assert write_parquet(path, [odd, *_mixed()]) == 3
    back = read_parquet(path)
    assert back[1:] == _mixed()
    assert back[0].turns == odd.turns and back[0].metadata == odd.metadata
    assert back[0].error == "bad \\udc80 byte"
    with_id = Trajectory(task_id="t\ud800", group_id="g0", prompt_ids=[1])
    assert write_parquet(tmp_path / "s.parquet", [with_id]) == 1
    assert read_parquet(tmp_path / "s.parquet")[0].task_id == "t\\ud800"


@pytest.mark.slow
def test_killed_rollout_keeps_the_groups_it_finished(tiny_dir, tmp_path):
    """A real crash: SIGKILL `toolgym rollout` once its first group is on disk; every line written is a whole
    trajectory and the sidecar says the run did not complete."""
    out = tmp_path / "roll.jsonl"
    cmd = [TOOLGYM, "rollout", "toolgym/Arith-v0", "--model", str(tiny_dir), "--tasks", "400", "--group", "1",
           "--concurrency", "1", "--out", str(out), "--max-tokens", "8", "--max-turns", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (out.exists() and out.stat().st_size > 0) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read()[-2000:]  # still running: this is an interruption
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    trajs = read_jsonl(out)
    assert 1 <= len(trajs) < 400 and all(t.prompt_ids and t.error is None for t in trajs)
    assert [t.metadata["task_index"] for t in trajs] == list(range(len(trajs)))  # groups in order, none torn
    meta = read_header(out)["meta"]
    assert meta["complete"] is False and meta["tasks"] == 400


def test_progress_on_a_terminal_is_a_rich_bar():
    """stderr on a real pseudo-terminal: the progress bar counts episodes and shows the running mean reward."""
    import pty

    code = ("import sys\n"
            "from toolgym._progress import Bar\n"
            "with Bar('episodes', 3, stream=sys.stderr, enabled=True) as bar:\n"
            "    for i in range(3):\n"
            "        bar.update(i + 1, 'mean reward 1.000')\n")
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=slave, env={**os.environ, "COLUMNS": "120", "TERM": "xterm"})
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=120) == 0
    screen = b"".join(chunks).decode(errors="replace")
    assert "3/3" in screen and "mean reward 1.000" in screen and "\x1b[" in screen
    assert "group 1/3 done" not in screen  # not the plain lines


def _app():
    from toolgym.cli import app

    return app
