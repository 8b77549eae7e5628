"""A complete toolgym environment in about 20 lines: reverse a word, with a tool to check it."""

import random

import toolgym
from toolgym.envs import GeneratorSource, Rubric, Task, ToolEnv, tool

WORDS = ["gymnasium", "sandbox", "verifier", "rollout", "reward", "tokenizer", "trajectory"]


@tool
def reverse(text: str) -> str:
    """Reverse a string.

    Args:
        text: the string to reverse.
    """
    return text[::-1]


def make_task(i: int, words: int = 1) -> Task:
    phrase = " ".join(random.Random(i).choices(WORDS, k=words))
    return Task(id=f"reverse-{words}-{i}", ground_truth=phrase[::-1],
                prompt=[{"role": "user", "content": f"Reverse '{phrase}'. Reply <answer>...</answer>."}])


def correct(answer: str | None, task: Task) -> float:
    return float(answer == task.ground_truth)


class ReverseEnv(ToolEnv):
    def __init__(self, words: int = 1, **kwargs):
        super().__init__(GeneratorSource(lambda i: make_task(i, words)), tools=[reverse],
                         rubric=Rubric([correct]), **kwargs)


def register_variants() -> None:
    toolgym.register("example/ReverseHard-v0", entry_point="toolgym_reverse_env:ReverseEnv", kwargs={"words": 3})
