"""toolgym/Arith-v0: seeded procedural arithmetic, difficulty knobs, the tool path to reward 1."""

from __future__ import annotations

import ast
import operator

import pytest

import toolgym
from toolgym.envs.checker import check_env
from toolgym.envs.tasks.arith import ArithConfig, generate
from toolgym.errors import ConfigError


def independent_eval(expr: str) -> int:
    """Evaluate with Python's own parser (not the env's evaluator) as the reference."""
    ops = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}

    def ev(n):
        if isinstance(n, ast.BinOp):
            return ops[type(n.op)](ev(n.left), ev(n.right))
        return n.value

    return ev(ast.parse(expr, mode="eval").body)


def test_ground_truth_matches_python_arithmetic():
    cfg = ArithConfig(min_digits=1, max_digits=6, terms=4, ops="+-*")
    for i in range(300):
        t = generate(i, 7, cfg)
        assert int(t.ground_truth) == independent_eval(t.metadata["expression"])


def test_difficulty_knobs():
    for i in range(50):
        t = generate(i, 0, ArithConfig(min_digits=4, max_digits=4, terms=3, ops="*"))
        nums = t.metadata["expression"].split(" * ")
        assert len(nums) == 3 and all(len(n) == 4 for n in nums)
    with pytest.raises(ConfigError, match="digits"):
        ArithConfig(min_digits=5, max_digits=2)
    with pytest.raises(ConfigError, match="ops"):
        ArithConfig(ops="/")
    with pytest.raises(ConfigError, match="terms"):
        ArithConfig(terms=1)


def test_prompt_is_short_and_seeded():
    env = toolgym.make("toolgym/Arith-v0", sandbox=None)
    obs, info = env.reset(seed=0)
    assert sum(len(m["content"]) for m in obs) < 200
    assert env.reset(seed=0) == (obs, info)
    assert env.reset(seed=1)[1]["task_id"] != info["task_id"]
    test_env = toolgym.make("toolgym/Arith-v0", sandbox=None, partition="test")
    train_ids = {env.reset(seed=s)[1]["task_id"] for s in range(30)}
    test_ids = {test_env.reset(seed=s)[1]["task_id"] for s in range(30)}
    assert train_ids.isdisjoint(test_ids)


@pytest.mark.parametrize("reply, reward", [
    ("Answer: {v}", 1.0), ("Answer: {v}.", 1.0), ("\\boxed{{{v}}}", 1.0), ("Answer: {w}", 0.0), ("{v}", 0.0),
])
def test_answer_formats(reply, reward):
    env = toolgym.make("toolgym/Arith-v0", sandbox=None)
    env.reset(seed=4)
    v = int(env.unwrapped.task.ground_truth)
    *_, r, term, _, info = env.step(reply.format(v=v, w=v + 1))
    assert term and r == reward


def test_format_weight_adds_a_component():
    env = toolgym.make("toolgym/Arith-v0", sandbox=None, format_weight=0.1)
    assert env.reward_range == (0.0, 1.1)
    env.reset(seed=0)
    *_, r, _, _, info = env.step("Answer: 0")
    assert info["reward_components"]["format_reward"] == 1.0 and r == pytest.approx(0.1)


def test_tool_path_earns_full_reward(local_sandbox):
    env = toolgym.make("toolgym/Arith-v0", sandbox=local_sandbox, min_digits=5, max_digits=6, terms=3)
    obs, info = env.reset(seed=12)
    expr = obs[-1]["content"].removeprefix("What is ").removesuffix("?")
    obs, r, term, trunc, info = env.step(f"```python\nprint({expr})\n```")
    assert not term and obs[0]["role"] == "tool"
    out = obs[0]["content"]
    obs, r, term, trunc, info = env.step(f"Answer: {out}")
    assert term and r == 1.0


def test_checker_passes():
    assert [c.name for c in check_env(lambda: toolgym.make("toolgym/Arith-v0")) if not c.ok] == []
