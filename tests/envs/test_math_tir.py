"""toolgym/MathTIR-v0: GSM8K/MATH from the asset cache, reasoning-gym generators, TIR with python."""

from __future__ import annotations

import pytest

import toolgym
from toolgym.envs.checker import check_env
from toolgym.envs.sources import TaskValidationError


def test_gsm8k_reference_answer_scores_and_wrong_does_not():
    env = toolgym.make("toolgym/MathTIR-v0", sandbox=None, limit=50)
    obs, info = env.reset(seed=3)
    assert obs[0]["role"] == "system" and "\\boxed" in obs[0]["content"]
    assert info["tools"][0]["function"]["name"] == "python"
    gt = env.unwrapped.task.ground_truth
    *_, r, term, _, info = env.step(f"So the total is \\boxed{{{gt}}}.")
    assert term and r == 1.0 and info["reward_components"]["correct"] == 1.0
    env.reset(seed=3)
    *_, r, term, _, _ = env.step("\\boxed{-123456789}")
    assert term and r == 0.0


def test_math_dataset_latex_answers():
    env = toolgym.make("toolgym/MathTIR-v0", dataset="math500", sandbox=None)
    env.reset(seed=0)
    gt = env.unwrapped.task.ground_truth
    *_, r, _, _, _ = env.step(f"Therefore the answer is $\\boxed{{{gt}}}$.")
    assert r == 1.0


def test_partitions_are_disjoint():
    train = toolgym.make("toolgym/MathTIR-v0", sandbox=None, partition="train", limit=200)
    test = toolgym.make("toolgym/MathTIR-v0", sandbox=None, partition="test", limit=200)
    a = {t.id for t in train.unwrapped.source}
    b = {t.id for t in test.unwrapped.source}
    assert a and b and a.isdisjoint(b) and len(a | b) == 200


@pytest.mark.slow
def test_reasoning_gym_arithmetic_source():
    env = toolgym.make("toolgym/MathTIR-v0", dataset="rg:basic_arithmetic", sandbox=None)
    obs, info = env.reset(seed=5)
    assert info["metadata"]["rg_dataset"] == "basic_arithmetic"
    *_, r, _, _, _ = env.step(f"\\boxed{{{env.unwrapped.task.ground_truth}}}")
    assert r == 1.0


def test_custom_file_with_a_bad_row(tmp_path):
    p = tmp_path / "m.jsonl"
    p.write_text('{"question": "1+1?", "answer": "2"}\n{"question": "no answer"}\n')
    with pytest.raises(TaskValidationError, match=r"m\.jsonl:2: field 'answer'"):
        toolgym.make("toolgym/MathTIR-v0", dataset=str(p), sandbox=None)


def test_aime_style_field_names(tmp_path):
    p = tmp_path / "aime.jsonl"
    p.write_text('{"id": "a1", "Problem": "Find 2+3.", "Answer": 5}\n')
    env = toolgym.make("toolgym/MathTIR-v0", dataset=str(p), sandbox=None)
    obs, _ = env.reset(seed=0)
    assert obs[-1]["content"] == "Find 2+3."
    assert env.step("\\boxed{5}")[1] == 1.0


def test_tir_episode_with_python(local_sandbox):
    env = toolgym.make("toolgym/MathTIR-v0", sandbox=local_sandbox, stateful=True,
                       dataset=[{"id": "p", "question": "What is 2^64 mod 1000007?", "answer": str(pow(2, 64, 1000007))}])
    env.reset(seed=0)
    obs, r, term, *_ = env.step("Let me compute.\n```python\nm = 1000007\nv = pow(2, 64, m)\n```")
    assert not term and "no output" in obs[0]["content"]
    obs, r, term, *_ = env.step("```python\nprint(v)\n```")
    assert obs[0]["content"] == str(pow(2, 64, 1000007))
    *_, r, term, _, info = env.step(f"The answer is \\boxed{{{obs[0]['content']}}}")
    assert term and r == 1.0


def test_checker_passes():
    assert [c.name for c in check_env(lambda: toolgym.make("toolgym/MathTIR-v0", limit=100)) if not c.ok] == []
