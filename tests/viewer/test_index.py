"""The viewer's index (one streaming pass: offsets, summaries, chunks) and its view of an episode."""

from __future__ import annotations

import json
import math

import pytest

from toolgym.agents.storage import RolloutFileError, write_jsonl
from toolgym.agents.trajectory import Trajectory
from toolgym.viewer.episode import episode_view
from toolgym.viewer.index import build_index


def _traj(i: int, **over) -> Trajectory:
    d = dict(task_id=f"task-{i // 3}", group_id=f"g{i // 3}", prompt_ids=[1, 2], response_ids=[3, 4, 5],
             loss_mask=[1, 0, 1], behavior_logprobs=[-0.5, 0.0, -1.25], reward=float(i % 3) / 2,
             turns=[{"role": "user", "content": "q"},
                    {"role": "assistant", "content": "a" * (50 * i),
                     "tool_calls": [{"id": "c1", "type": "function",
                                     "function": {"name": "python", "arguments": {"code": "print(1)"}}}]},
                    {"role": "tool", "name": "python", "tool_call_id": "c1", "content": "1"},
                    {"role": "assistant", "content": "Answer: 1"}],
             finish_reason=["answer", "max_turns", "no_answer"][i % 3])
    d.update(over)
    return Trajectory(**d)


def test_offsets_read_back_each_episode_and_chunks_cover_the_file(tmp_path):
    path = tmp_path / "r.jsonl"
    trajs = [_traj(i) for i in range(30)]
    write_jsonl(path, trajs, meta={"env_id": "e"})
    index = build_index(path, chunk_bytes=4000, chunk_episodes=7)
    assert len(index) == 30 and index.meta == {"env_id": "e"}
    assert [Trajectory.from_dict(d) for d in index.read([29, 0, 13])] == [trajs[29], trajs[0], trajs[13]]
    ranges = [index.chunk_range(c) for c in range(len(index.chunks))]
    assert [i for r in ranges for i in r] == list(range(30))  # contiguous, in order, nothing twice
    assert len(ranges) > 30 / 7
    for r in ranges:  # each chunk stays under its limits unless one episode alone exceeds them
        assert len(r) <= 7
        assert len(r) == 1 or sum(index.lengths[i] for i in list(r)[:-1]) < 4000
    cols = index.columns
    assert cols["r"][:3] == [0.0, 0.5, 1.0] and cols["n"][0] == 2 and cols["c"][0] == 1
    assert [cols["finishes"][f] for f in cols["f"][:3]] == ["answer", "max_turns", "no_answer"]
    assert cols["tasks"][cols["t"][29]] == "task-9" and len(cols["groups"]) == 10
    assert cols["k"][0] == 3 and cols["m"][0] == 2


def test_non_finite_numbers_become_none(tmp_path):
    path = tmp_path / "r.jsonl"
    write_jsonl(path, [_traj(0, reward=math.nan, behavior_logprobs=[math.nan, 0.0, -math.inf])])
    index = build_index(path)
    assert index.columns["r"] == [None]
    view = episode_view(index.read([0])[0], 0, with_tokens=True)
    assert view["reward"] is None and view["reward_text"] == "NaN"
    assert view["tokens"]["logp"] == [None, 0.0, None]
    json.dumps(view, allow_nan=False)  # what the page gets is strict JSON


def test_older_header_line_torn_last_line_and_bad_lines(tmp_path):
    old = tmp_path / "old.jsonl"
    header = {"kind": "toolgym.rollouts", "schema_version": 1, "meta": {"model": "m"}}
    old.write_text(json.dumps(header) + "\n" + _traj(0).to_json() + "\n" + _traj(1).to_json()[:40])
    index = build_index(old)
    assert len(index) == 1 and index.meta == {"model": "m"}
    assert "line 3 is incomplete" in index.warnings[0]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(_traj(0).to_json() + "\n{oops\n" + _traj(1).to_json() + "\n")
    with pytest.raises(RolloutFileError, match="bad.jsonl:2: not valid JSON"):
        build_index(bad)
    misaligned = tmp_path / "mis.jsonl"
    misaligned.write_text(json.dumps({**_traj(0).to_dict(), "loss_mask": [1]}) + "\n")
    with pytest.raises(RolloutFileError, match="mis.jsonl:1: not a trajectory"):
        build_index(misaligned)
    with pytest.raises(RolloutFileError, match="cannot read"):
        build_index(tmp_path / "missing.jsonl")
    with pytest.raises(RolloutFileError, match="reads JSONL"):
        build_index(tmp_path / "r.parquet")


def test_episode_view_sets_tool_calls_and_results_apart():
    t = _traj(1).to_dict()
    t["turns"][1]["tool_calls"].append({"id": "c2", "type": "function",
                                        "function": {"name": "calc", "arguments": '{"expr": "1+1"}'}})
    t["turns"].append("not a message")
    t["metadata"] = {"tools": [{"type": "function", "function": {"name": "python"}}], "sampler": "hf",
                     "train": {"advantage": -0.5, "passes": 2, "trained": True,
                               "clip": {"low": [2, 0, 99, -1, "x"], "high": None}}}
    v = episode_view(t, 7, with_tokens=False)
    assert v["i"] == 7 and "tokens" not in v and v["tools"] == ["python"]
    calls = v["turns"][1]["calls"]
    assert calls[0] == {"name": "python", "id": "c1", "code": "print(1)", "args": None}
    assert calls[1]["name"] == "calc" and json.loads(calls[1]["args"]) == {"expr": "1+1"}  # a JSON string, parsed
    assert v["turns"][2] == {"role": "tool", "content": "1", "calls": [], "name": "python", "call_id": "c1"}
    assert v["turns"][-1] == {"role": "?", "content": "not a message", "calls": []}
    # positions outside the response, or not numbers, are dropped
    assert v["train"]["clip"] == {"high": [], "low": [0, 2], "dual": []} and v["train"]["advantage"] == -0.5
    assert json.loads(v["meta"]) == {"sampler": "hf"}


def test_calls_are_read_back_from_the_text_when_a_result_answers_them():
    """The runner stores assistant turns as text: the view reads calls back with the model's format (or fenced
    python blocks) and keeps those a tool result answers, i.e. those the environment ran."""
    hermes = '<tool_call>{"name": "calc", "arguments": {"expr": "2+2"}}</tool_call>'
    turns = [{"role": "user", "content": "q"},
             {"role": "assistant", "content": "```python\nprint(1)\n```"},
             {"role": "tool", "name": "python", "tool_call_id": "call_1_0", "content": "1"},
             {"role": "assistant", "content": f"now {hermes}"},
             {"role": "tool", "name": "calc", "tool_call_id": "call_2_0", "content": "4"},
             {"role": "assistant", "content": f"not run: {hermes} Answer: 4"}]
    t = _traj(0, turns=turns).to_dict()
    t["metadata"] = {"tool_parser": "hermes"}
    v = episode_view(t, 0, with_tokens=False)["turns"]
    assert v[1]["calls"] == [{"name": "python", "id": "call_1_0", "code": "print(1)\n", "args": None, "parsed": True}]
    assert v[3]["calls"] == [{"name": "calc", "id": "call_2_0", "code": None, "args": json.dumps({"expr": "2+2"}, indent=1),
                              "parsed": True}]
    assert v[5]["calls"] == []  # no result answers it: the environment did not run it


def test_index_counts_only_clipped_positions_inside_the_response(tmp_path):
    path = tmp_path / "r.jsonl"
    train = {"advantage": [0.5, None, 1.5], "clip": {"low": [2, 0, 99, -1, "x"], "high": [0], "other": [1]}}
    write_jsonl(path, [_traj(0, metadata={"train": train})])
    cols = build_index(path).columns
    assert cols["x"] == [2] and cols["a"] == [1.0]  # per-token advantages: their mean


def test_an_episode_of_a_training_mixture_names_its_environment(tmp_path):
    path = tmp_path / "r.jsonl"
    write_jsonl(path, [_traj(0, metadata={"env": "myorg/Reverse-v0"}), _traj(1)])
    index = build_index(path)
    assert [episode_view(obj, i, with_tokens=False)["env"] for i, obj in enumerate(index.read([0, 1]))] == \
        ["myorg/Reverse-v0", None]
