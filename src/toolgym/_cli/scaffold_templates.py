'''The files `toolgym envs new` writes, as string.Template texts over the names of `scaffold.Names`
(${name}, ${module}, ${camel}, ${cls}, ${env_id}); paths are templates too.'''

from __future__ import annotations

PYPROJECT = '''\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "${name}"
version = "0.1.0"
description = "A toolgym environment: count a letter in a word, with a tool that counts"
requires-python = ">=3.10"
dependencies = ["toolgym"]

# `toolgym.make("${env_id}")`, `toolgym envs check` and a config's `rollout.env` find the environment
# through this entry point once the package is installed, without an import.
[project.entry-points."toolgym.envs"]
"${env_id}" = "${module}:${cls}"

[tool.setuptools.packages.find]
where = ["src"]

[tool.pytest.ini_options]
testpaths = ["tests"]
'''

ENV_MODULE = '''\
"""${env_id}: how many times does a letter occur in a word? The model may call `count_letter`.

An environment is a task source (index -> Task), tools, and a Rubric that scores the final answer.
Change the three to make it yours; `toolgym envs check ${env_id}` says whether a run can use it.
"""

import random

from toolgym.envs import GeneratorSource, Rubric, Task, ToolEnv, tool

WORDS = ["strawberry", "banana", "mississippi", "parallel", "bookkeeper", "committee", "assessment", "sandbox"]


@tool
def count_letter(text: str, letter: str) -> int:
    """Count how many times a letter occurs in a text.

    Args:
        text: the text to search.
        letter: the letter to count.
    """
    return text.count(letter)


def make_task(i: int) -> Task:
    """Task `i`, the same for the same index (a seed picks tasks reproducibly)."""
    rng = random.Random(i)
    word = rng.choice(WORDS)
    letter = rng.choice(sorted(set(word)))
    question = f"How many times does the letter '{letter}' occur in '{word}'? Reply <answer>N</answer>."
    return Task(id=f"count-{i}", ground_truth=str(word.count(letter)), metadata={"word": word, "letter": letter},
                prompt=[{"role": "user", "content": question}])


def correct(answer: str | None, task: Task) -> float:
    """1 for the right count."""
    return float(answer is not None and answer.strip() == task.ground_truth)


def answered(answer: str | None) -> float:
    """1 for answering in the asked form at all (weighted 0.1 below)."""
    return float(answer is not None)


class ${cls}(ToolEnv):
    """Takes **kwargs and hands them on: a run passes sandbox=, partition=, dataset= and seed=."""

    def __init__(self, **kwargs):
        super().__init__(GeneratorSource(make_task), tools=[count_letter],
                         rubric=Rubric([correct, (answered, 0.1)]), **kwargs)
'''

TEST = '''\
"""The checks `toolgym envs check ${env_id}` runs, and one episode played by hand.
They find the environment by its entry point: install the package first (`pip install -e .`)."""

import json

import pytest

import toolgym
from toolgym.envs.checker import check_builds, check_env, run_builds

ENV_ID = "${env_id}"


def test_passes_the_environment_checker():
    checks = check_builds(ENV_ID)
    checks += check_env(next(iter(run_builds(ENV_ID).values())))
    failed = [c for c in checks if not c.ok]
    assert not failed, failed


def test_one_episode_calls_the_tool_then_answers():
    env = toolgym.make(ENV_ID)
    try:
        obs, info = env.reset(seed=0)
        quoted = obs[-1]["content"].split("'")
        letter, word = quoted[1], quoted[3]
        expected = sum(ch == letter for ch in word)

        call = {"name": "count_letter", "arguments": {"text": word, "letter": letter}}
        obs, reward, terminated, truncated, info = env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
        assert not terminated and not truncated
        assert obs[-1]["role"] == "tool" and obs[-1]["content"].strip() == str(expected), obs[-1]

        obs, reward, terminated, truncated, info = env.step(f"<answer>{expected}</answer>")
        assert terminated
        assert reward == pytest.approx(1.1)  # right (1) + answered in the asked form (0.1)
    finally:
        env.close()


def test_a_wrong_answer_earns_only_the_form_term():
    env = toolgym.make(ENV_ID)
    try:
        env.reset(seed=1)
        obs, reward, terminated, truncated, info = env.step("<answer>-1</answer>")
        assert terminated and reward == pytest.approx(0.1)
    finally:
        env.close()
'''

TRAIN_YAML = '''\
# One GRPO step on ${env_id} with the small demo model (runs on a CPU in a minute or two).
# Put a real model in model.name_or_path, and raise steps, for a real run.
algorithm: grpo
seed: 0
output_dir: runs/${name}
steps: 1
mini_batches: 1
model:
  name_or_path: demo
  model_kwargs: {layers: 1, hidden: 32, heads: 2, intermediate: 64, max_positions: 192, vocab_size: 300}
rollout:
  env: ${env_id}
  group_size: 2
  prompts_per_step: 2
  max_turns: 2
  max_new_tokens: 8
  max_response_tokens: 24
sft:
  enabled: false   # the demo's warm start writes Arith demonstrations; this environment has none
eval:
  every: 0
  tasks: 2
'''

README = '''\
# ${name}

A toolgym environment, `${env_id}`: count a letter in a word, with a `count_letter` tool.
Written by `toolgym envs new ${name}`; the environment is `src/${module}/__init__.py`.

From this folder, in the Python environment that has toolgym:

```bash
pip install -e .                     # registers ${env_id} through its entry point
toolgym envs check ${env_id}         # the checks a run relies on
toolgym train train.yaml             # one training step with the demo model -> runs/${name}/
```

`python -m pytest` runs `tests/test_env.py`: the same checks, and one episode played by hand.
'''

TEMPLATES: dict[str, str] = {
    "pyproject.toml": PYPROJECT,
    "src/${module}/__init__.py": ENV_MODULE,
    "tests/test_env.py": TEST,
    "train.yaml": TRAIN_YAML,
    "README.md": README,
}
