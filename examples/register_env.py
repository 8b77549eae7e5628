"""Registering a tool environment in about 20 lines (the README's example), then one episode.

    .venv/bin/python examples/register_env.py
"""

import random

import toolgym
from toolgym.envs import GeneratorSource, Rubric, Task, ToolEnv, tool


@tool
def reverse(text: str) -> str:
    """Reverse a string.

    Args:
        text: the string to reverse.
    """
    return text[::-1]


def make_task(i: int) -> Task:
    word = random.Random(i).choice(["gymnasium", "sandbox", "verifier", "rollout"])
    return Task(id=f"reverse-{i}", ground_truth=word[::-1],
                prompt=[{"role": "user", "content": f"Reverse '{word}'. Reply <answer>...</answer>."}])


def correct(answer: str | None, task: Task) -> float:
    return float(answer == task.ground_truth)


class ReverseEnv(ToolEnv):
    def __init__(self, **kwargs):
        super().__init__(GeneratorSource(make_task), tools=[reverse], rubric=Rubric([correct]), **kwargs)


toolgym.register("myorg/Reverse-v0", entry_point=ReverseEnv)  # or "mypkg.envs:ReverseEnv"

if __name__ == "__main__":
    env = toolgym.make("myorg/Reverse-v0")
    obs, info = env.reset(seed=0)
    word = obs[-1]["content"].split("'")[1]
    obs, reward, terminated, truncated, info = env.step(
        f'<tool_call>{{"name": "reverse", "arguments": {{"text": "{word}"}}}}</tool_call>')
    print("tool said:", obs[0]["content"])
    obs, reward, terminated, truncated, info = env.step(f"<answer>{obs[0]['content']}</answer>")
    print("reward:", reward, "components:", info["reward_components"])
