"""toolgym/Arith-v0 with parts=K: K questions asked one after another in one episode, one reward at the end.

What a policy could try for reward without the answers: answer every part at once in the first turn, skip a
part, stop early, or repeat a right answer; none of these may score more than the parts it answered right.
"""

from __future__ import annotations

import pytest

import toolgym
from toolgym.envs.tasks.arith import ArithConfig, generate
from toolgym.errors import ConfigError
from toolgym.training.sft import arith_demonstrations

from .test_arith import independent_eval

KW = {"min_digits": 1, "max_digits": 2, "terms": 2, "ops": "+-*", "system_prompt": None}


def _env(parts: int = 3, **kw):
    return toolgym.make("toolgym/Arith-v0", sandbox=None, parts=parts, max_turns=2 * parts, **{**KW, **kw})


def _truths(env) -> list[str]:
    return [independent_eval(e) for e in env.unwrapped.task.metadata["expressions"]]


def test_parts_are_independent_expressions_and_the_first_matches_the_one_part_stream() -> None:
    for i in range(50):
        multi = generate(i, 3, ArithConfig(1, 2, 2, "+-*", parts=4))
        single = generate(i, 3, ArithConfig(1, 2, 2, "+-*"))
        exprs = multi.metadata["expressions"]
        assert len(exprs) == 4 and exprs[0] == single.metadata["expression"]
        assert multi.prompt == single.prompt == [{"role": "user", "content": f"What is {exprs[0]}?"}]
        assert multi.ground_truth == "; ".join(str(independent_eval(e)) for e in exprs)


def test_each_answer_brings_the_next_question_and_the_reward_is_the_fraction_right() -> None:
    env = _env(3)
    env.reset(seed=0, options={"index": 5})
    exprs = env.unwrapped.task.metadata["expressions"]
    truths = _truths(env)
    obs, reward, done, trunc, _ = env.step(f"Answer: {truths[0]}")
    assert obs == [{"role": "user", "content": f"What is {exprs[1]}?"}] and reward == 0.0 and not done
    obs, reward, done, _, _ = env.step(f"Answer: {truths[1] + 1}")
    assert obs == [{"role": "user", "content": f"What is {exprs[2]}?"}] and not done
    obs, reward, done, _, info = env.step(f"The answer is {truths[2]}.")
    assert done and obs == [] and reward == pytest.approx(2 / 3)
    assert info["reward_components"] == {"arith_correct": pytest.approx(2 / 3)}


def test_all_mode_pays_only_when_every_part_is_right() -> None:
    for wrong_part, expected in ((None, 1.0), (1, 0.0)):
        env = _env(3, part_reward="all")
        env.reset(seed=0, options={"index": 2})
        truths = _truths(env)
        for k, t in enumerate(truths):
            _, reward, done, _, _ = env.step(f"Answer: {t + 1 if k == wrong_part else t}")
        assert done and reward == expected


def test_answering_everything_at_once_or_skipping_parts_scores_only_what_was_answered() -> None:
    env = _env(3)
    env.reset(seed=0, options={"index": 7})
    truths = _truths(env)
    _, reward, done, _, _ = env.step("Answer: " + "; ".join(map(str, truths)))  # all parts in the first turn
    assert not done and reward == 0.0  # one line is one part's answer, and "a; b; c" is not the first value
    env.step("no idea")  # no answer at all for the second part
    _, reward, done, _, _ = env.step(f"Answer: {truths[2]}")
    assert done and reward == pytest.approx(1 / 3)
    env = _env(3)  # the first right answer repeated for every part
    env.reset(seed=0, options={"index": 7})
    for _ in range(3):
        _, reward, done, _, _ = env.step(f"Answer: {_truths(env)[0]}")
    assert done and reward == pytest.approx(sum(t == truths[0] for t in truths) / 3)


def test_running_out_of_turns_scores_the_missing_parts_as_wrong() -> None:
    env = toolgym.make("toolgym/Arith-v0", sandbox=None, parts=2, max_turns=4, **KW)
    env.reset(seed=0, options={"index": 1})
    truths = _truths(env)
    env.step(f"Answer: {truths[0]}")
    for _ in range(3):  # tool calls until the turn budget (4) ends, the second part never answered
        _, reward, done, trunc, info = env.step("```python\nprint(1)\n```")
    assert trunc and info["finish_reason"] == "max_turns" and reward == pytest.approx(0.5)


def test_bad_part_settings_are_one_line() -> None:
    with pytest.raises(ConfigError, match="parts must be in 1..8"):
        toolgym.make("toolgym/Arith-v0", sandbox=None, parts=9, max_turns=18)
    with pytest.raises(ConfigError, match="max_turns >= 6"):
        toolgym.make("toolgym/Arith-v0", sandbox=None, parts=3, max_turns=4)
    with pytest.raises(ConfigError, match="part_reward"):
        toolgym.make("toolgym/Arith-v0", sandbox=None, parts=3, max_turns=6, part_reward="sum")


def test_demonstrations_follow_the_episode_layout() -> None:
    demos = arith_demonstrations(40, seed=1, env_kwargs={**KW, "parts": 3, "max_turns": 6})
    for d in demos:
        msgs = d["messages"]
        questions = [m["content"] for m in msgs if m["role"] == "user"]
        answers = [m["content"] for m in msgs if m["role"] == "assistant" and m["content"].startswith("Answer: ")]
        assert len(questions) == len(answers) == 3
        exprs = [q.removeprefix("What is ").removesuffix("?") for q in questions]
        for m, nxt in zip(msgs, msgs[1:], strict=False):  # a tool call is followed by the true value
            if m["role"] == "assistant" and m["content"].startswith("```python"):
                expr = m["content"].split("print(")[1].split(")")[0]
                assert expr in exprs and nxt == {"role": "tool", "name": "python", "content": str(independent_eval(expr))}
    tool_parts = sum(m["content"].startswith("```python") for d in demos for m in d["messages"] if m["role"] == "assistant")
    assert 0.3 < tool_parts / (3 * len(demos)) < 0.7  # tool_fraction 0.5 per part


def test_one_part_demonstrations_are_unchanged() -> None:
    demo = arith_demonstrations(1, env_kwargs={"min_digits": 1, "max_digits": 1, "terms": 2, "ops": "+-*",
                                               "system_prompt": None})[0]
    assert demo["messages"] == [  # recorded before the multi-part change (same seed, same stream)
        {"role": "user", "content": "What is 2 - 3?"},
        {"role": "assistant", "content": "```python\nprint(2 - 3)\n```"},
        {"role": "tool", "name": "python", "content": "-1"},
        {"role": "assistant", "content": "Answer: -1"}]
