"""JSONL persistence (lossless, versioned) and the `toolgym rollout` / `toolgym rollouts show` commands.
Other formats, pandas/`datasets` and interrupted runs: test_storage_formats.py."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from toolgym.agents.storage import RolloutFileError, group_by, read_header, read_jsonl, write_jsonl
from toolgym.agents.trajectory import SCHEMA_VERSION, Trajectory

TOOLGYM = str(Path(sys.executable).parent / "toolgym")  # the installed console script


def _traj(i: int) -> Trajectory:
    return Trajectory(task_id=f"t{i // 2}", group_id=f"g{i // 2}", prompt_ids=[1, 2, 3],
                      response_ids=[4, 5, 6, 7], loss_mask=[1, 1, 0, 1],
                      behavior_logprobs=[-0.1 / 3, -1e-300, 0.0, -math.pi * (i + 1)],
                      reward=0.5 * i, reward_breakdown={"correct": 1.0},
                      turns=[{"role": "user", "content": "é ✓ \u2028"}, {"role": "assistant", "content": "x"}],
                      finish_reason="answer", timings={"total_s": 0.25}, metadata={"episode_index": i % 2})


def test_jsonl_round_trip_is_lossless(tmp_path):
    trajs = [_traj(i) for i in range(4)]
    path = tmp_path / "r.jsonl"
    assert write_jsonl(path, trajs, meta={"env_id": "x"}) == 4
    back = read_jsonl(path)
    assert back == trajs  # dataclass equality: every field, floats bit-for-bit
    assert read_header(path)["schema_version"] == SCHEMA_VERSION
    assert [len(g) for g in group_by(back)] == [2, 2]


def test_newer_schema_and_garbage_are_refused(tmp_path):
    p = tmp_path / "new.jsonl"
    p.write_text(json.dumps({"kind": "toolgym.rollouts", "schema_version": SCHEMA_VERSION + 1}) + "\n")
    with pytest.raises(RolloutFileError, match="newer"):
        read_jsonl(p)
    q = tmp_path / "bad.jsonl"
    q.write_text("{not json\n")
    with pytest.raises(RolloutFileError, match="bad.jsonl:1"):
        read_jsonl(q)
    with pytest.raises(RolloutFileError, match="cannot read"):
        read_jsonl(tmp_path / "missing.jsonl")


def test_misaligned_trajectory_is_rejected():
    with pytest.raises(ValueError, match="must align"):
        Trajectory(task_id="t", group_id="g", prompt_ids=[1], response_ids=[1, 2], loss_mask=[1], behavior_logprobs=[0.0])


def test_rollouts_show_prints_turns_and_rewards(tmp_path):
    from toolgym.cli import app

    path = tmp_path / "r.jsonl"
    write_jsonl(path, [_traj(i) for i in range(3)], meta={"env_id": "toolgym/Arith-v0", "model": "m", "sampler": "hf"})
    res = CliRunner().invoke(app, ["rollouts", "show", str(path)])
    assert res.exit_code == 0, res.output
    assert "3 episodes in 2 groups" in res.output and "reward 1" in res.output and "[assistant] x" in res.output
    res = CliRunner().invoke(app, ["rollouts", "show", str(path), "--json"])
    rows = json.loads(res.output)["episodes"]
    assert [r["reward"] for r in rows] == [0.0, 0.5, 1.0]


def test_cli_errors_are_one_line(tmp_path):
    out = subprocess.run([TOOLGYM, "rollouts", "show", str(tmp_path / "nope.jsonl")],
                         capture_output=True, text=True)
    assert out.returncode != 0
    assert out.stderr.strip().startswith("error:") and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_rollout_command_writes_a_readable_file(tiny_dir, tmp_path):
    """`toolgym rollout` on the real Arith env with the tiny model: one JSONL with N*G token-exact episodes."""
    out = tmp_path / "roll.jsonl"
    cmd = [TOOLGYM, "rollout", "toolgym/Arith-v0", "--model", str(tiny_dir),
           "--tasks", "2", "--group", "2", "--out", str(out), "--max-tokens", "8", "--max-turns", "2", "--json"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    summary = json.loads(res.stdout)
    assert summary["episodes"] == 4 and summary["groups"] == 2
    # progress off a terminal: what it is doing first, then plain stderr lines of episodes done (the first and
    # the last at least; at most one every few seconds between them)
    err = res.stderr.splitlines()
    assert err[0].startswith("loading the model: ") and err[1].startswith("sampling 2 tasks x 2 episodes")
    assert [x.split(" ")[1] for x in err if x.startswith("episodes ")] == ["0/4", "1/4", "4/4"]
    trajs = read_jsonl(out)
    meta = read_header(out)["meta"]
    assert len(trajs) == 4 and meta["env_id"] == "toolgym/Arith-v0" and meta["complete"] is True
    for g in group_by(trajs):
        assert len(g) == 2 and len({t.task_id for t in g}) == 1
    for t in trajs:
        assert t.prompt_ids and len(t.loss_mask) == len(t.response_ids) == len(t.behavior_logprobs)
        assert t.error is None, t.error
        assert sum(t.loss_mask) > 0


@pytest.mark.slow
def test_rollout_command_tool_parser_override(tiny_dir, tmp_path):
    """--tool-parser names the model's format: recorded in the file; an unknown one fails before any model loads."""
    out = tmp_path / "roll.jsonl"
    cmd = [TOOLGYM, "rollout", "toolgym/Arith-v0", "--model", str(tiny_dir), "--tasks", "1", "--group", "1",
           "--out", str(out), "--max-tokens", "4", "--max-turns", "1", "--json", "--no-progress"]
    res = subprocess.run([*cmd, "--tool-parser", "mistral"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    meta = read_header(out)["meta"]
    assert (meta["tool_parser"], meta["tool_parser_source"]) == ("mistral", "override")
    assert [t.metadata["tool_parser"] for t in read_jsonl(out)] == ["mistral"]
    res = subprocess.run([*cmd, "--tool-parser", "xml"], capture_output=True, text=True, timeout=600)
    assert res.returncode != 0 and res.stderr.startswith("error:") and "unknown tool-call format 'xml'" in res.stderr
    assert "gpt_oss" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_rollout_command_rejects_unknown_sampler(tiny_dir, tmp_path):
    res = subprocess.run([TOOLGYM, "rollout", "toolgym/Arith-v0", "--model", str(tiny_dir),
                          "--sampler", "nope", "--out", str(tmp_path / "x.jsonl")], capture_output=True, text=True)
    assert res.returncode != 0 and res.stderr.startswith("error:") and "sampler" in res.stderr
