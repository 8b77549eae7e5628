"""`toolgym analyze teacher-signal` end to end on a tiny saved model and a rollouts file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.training.mopd_tiny import tiny_lm, tiny_tokenizer
from toolgym.agents.storage import write_jsonl
from toolgym.agents.trajectory import Trajectory
from toolgym.analysis.teacher_signal import groups_from_trajectories, problem_text, response_text


def _traj(task: str, question: str, answer: str, reward: float, tok, with_turns: bool = True) -> Trajectory:
    prompt_ids = tok(question, add_special_tokens=False)["input_ids"]
    resp_ids = tok(answer, add_special_tokens=False)["input_ids"]
    turns = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": question},
             {"role": "assistant", "content": answer}] if with_turns else []
    return Trajectory(task_id=task, group_id=task, prompt_ids=prompt_ids, response_ids=resp_ids,
                      loss_mask=[1] * len(resp_ids), behavior_logprobs=[-1.0] * len(resp_ids), reward=reward,
                      turns=turns)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("tiny_model")
    tiny_lm().save_pretrained(d)
    tiny_tokenizer().save_pretrained(d)
    return d


@pytest.fixture()
def rollouts(tmp_path) -> Path:
    tok = tiny_tokenizer()
    trajs = []
    data = {
        "add": ("What is 3 plus 4?", [(" 7", 1), (" 8", 0), (" The answer is 7.", 1), (" 12", 0)]),
        "mul": ("Compute 12 times 2.", [(" 24", 1), (" 22", 0), (" 21", 0), (" The answer is 24.", 1)]),
        "sub": ("What is 9 minus 2?", [(" 7", 1), (" 7.", 1)]),
        "one": ("What is 1 plus 1?", [(" 2", 1)]),
    }
    for task, (q, answers) in data.items():
        trajs += [_traj(task, q, a, r, tok) for a, r in answers]
    path = tmp_path / "rollouts.jsonl"
    write_jsonl(path, trajs)
    return path


def test_text_views() -> None:
    turns = [{"role": "system", "content": "s"}, {"role": "user", "content": "Q"},
             {"role": "assistant", "content": "call"}, {"role": "tool", "content": "42"},
             {"role": "assistant", "content": "done"}]
    assert problem_text(turns) == "Q"
    assert response_text(turns) == "call\n[tool]\n42\ndone"
    tok = tiny_tokenizer()
    t = _traj("x", "What is 3 plus 4?", " The answer is 7.", 1.0, tok, with_turns=False)
    g = groups_from_trajectories([t, t], lambda ids: tok.decode(ids, skip_special_tokens=True))
    assert g[0].texts == [" The answer is 7."] * 2 and g[0].problem == "What is 3 plus 4?"
    with pytest.raises(ValueError):
        groups_from_trajectories([t], None)


def test_cli_teacher_signal(model_dir: Path, rollouts: Path, tmp_path: Path) -> None:
    from toolgym.cli import app

    out = tmp_path / "report"
    res = CliRunner().invoke(app, ["analyze", "teacher-signal", str(rollouts), "--model", str(model_dir),
                                   "--out", str(out), "--n-boot", "200", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["counts"]["prompts"] == 3  # the 1-response prompt is skipped
    assert data["counts"]["prompts_both_outcomes"] == 2
    for cond in ("none", "2S", "2S1F"):
        assert cond in data["table"]
    assert data["table"]["none"]["prompts"]["n"] == 2
    auc = data["table"]["none"]["success_auc"]
    assert 0.0 <= auc["lo"] <= auc["mean"] <= auc["hi"] <= 1.0
    assert (out / "teacher_signal.png").stat().st_size > 1000
    md = (out / "teacher_signal.md").read_text()
    assert "Goodman–Kruskal γ" in md and "Kendall τ-b" in md
    rows = [json.loads(x) for x in (out / "scores.jsonl").read_text().splitlines()]
    assert all(r["score"] < 0 and r["n_tokens"] > 0 for r in rows)


def test_cli_errors_are_one_line(model_dir: Path, tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("toolgym")
    r = subprocess.run([str(exe), "analyze", "teacher-signal", str(tmp_path / "missing.jsonl"), "--model",
                        str(model_dir)], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert r.stderr.strip().startswith("error:") and "missing.jsonl" in r.stderr
    assert "Traceback" not in r.stderr
