"""toolgym/Program-v0: an agent program as an environment. Built like any other (its tasks borrowed from another
environment or given as records), it hides the ground truth from the program, scores the outcome with its
rubric, refuses a bad config in one line, and passes the environment checker."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from toolgym.envs.program import ProgramEnv, is_program_env
from toolgym.envs.registry import make_env
from toolgym.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
AGENT = str(ROOT / "examples" / "openai_agent.py")
ARITH = {"min_digits": 1, "max_digits": 1, "terms": 2, "ops": "+", "system_prompt": None}


def test_tasks_come_from_another_environment_and_the_program_never_sees_the_answer():
    env = make_env("toolgym/Program-v0", {"program": AGENT, "tasks_kwargs": ARITH, "tools": ["python"]},
                   partition="train")
    arith = make_env("toolgym/Arith-v0", ARITH, sandbox=None, partition="train")
    obs, info = env.reset(seed=3, options={"index": 3})
    want, want_info = arith.reset(seed=3, options={"index": 3})
    assert obs == want and info["task_id"] == want_info["task_id"]
    assert [t["function"]["name"] for t in info["tools"]] == ["python"]
    task = env.unwrapped.task_at(3)
    view = env.unwrapped.program_view(task)
    assert set(view) == {"id", "prompt"} and task.ground_truth not in str(view["id"])
    spec = env.unwrapped.program
    assert spec.trusted is False and spec.argv(env.unwrapped.question(task))[1:] == [AGENT, want[-1]["content"]]
    # stepped directly, the text is the outcome the rubric scores
    _, reward, terminated, _, step_info = env.step(f"Answer: {task.ground_truth}")
    assert (reward, terminated, step_info["reward_components"]) == (1.0, True, {"correct_answer": 1.0})
    env.reset(options={"index": 3})
    assert env.step("Answer: -1")[1] == 0.0


def test_records_as_tasks_and_a_reward_function_by_name(tmp_path):
    data = tmp_path / "tasks.jsonl"
    data.write_text('{"id": "a", "question": "What is 2 + 3?", "answer": "5"}\n')
    env = make_env("toolgym/Program-v0", {"program": AGENT, "dataset": str(data),
                                          "reward": "toolgym.envs.rubric:format_reward"})
    obs, info = env.reset(options={"index": 0})
    assert obs == [{"role": "user", "content": "What is 2 + 3?"}] and info["task_id"] == "a"
    assert env.unwrapped.source.size == 1
    assert env.step("Answer: 7")[3:][1]["reward_components"].keys() == {"format_reward"}


@pytest.mark.parametrize("kwargs, words", [
    ({"program": "no/such/agent.py"}, "must be an existing Python file"),
    ({"program": str(ROOT / "pyproject.toml")}, "must be an existing Python file"),
    ({"program": AGENT, "args": "{question}"}, "args must be a list of strings"),
    ({"program": AGENT, "trusted": "yes"}, "trusted must be true or false"),
    ({"program": AGENT, "timeout_s": 0}, "timeout_s > 0"),
    ({"program": AGENT, "tasks_from": None}, "give tasks_from"),
    ({"program": AGENT, "reward": "no_such_module:fn"}, "not an importable module:function"),
    ({"program": AGENT, "tools": [3]}, "tools must be"),
])
def test_a_bad_config_is_one_clear_line(kwargs, words):
    with pytest.raises(ConfigError, match=words) as exc:
        make_env("toolgym/Program-v0", kwargs)
    assert "\n" not in str(exc.value)


def test_it_is_known_as_a_program_environment_without_being_built():
    assert is_program_env("toolgym/Program-v0")
    assert not is_program_env("toolgym/Arith-v0")
    assert isinstance(make_env("toolgym/Program-v0", {"program": AGENT}).unwrapped, ProgramEnv)


def test_toolgym_envs_check_passes_it():
    from toolgym.cli import app

    res = CliRunner().invoke(app, ["envs", "check", "toolgym/Program-v0", "-k", f"program={AGENT}"])
    assert res.exit_code == 0, res.output


def test_the_docs_show_the_example_program_as_it_is():
    """docs/training/agent-programs.md lists examples/openai_agent.py (a listing, skipped by the docs test):
    it must be the file, line for line."""
    page = (ROOT / "docs" / "training" / "agent-programs.md").read_text()
    listing = page.split("```python\n", 1)[1].split("```\n", 1)[0]
    assert listing == Path(AGENT).read_text()
