"""toolgym/MathTIR-v0: math word problems solved with a Python tool (tool-integrated reasoning).

Tasks: GSM8K, MATH, MATH-500 (cached assets), an AIME-format file (`dataset="aime:PATH"`), any file with
`question`/`answer`, or a reasoning-gym arithmetic/algebra generator (`dataset="rg:basic_arithmetic"`). Reward: 1 when
the final answer (\\boxed{} or "Answer: ...") is mathematically equal to the reference.
"""

from __future__ import annotations

from typing import Any

from toolgym.envs.builtin.datasets import build_source
from toolgym.envs.builtin_tools import python_tool
from toolgym.envs.core import ToolEnv
from toolgym.envs.rubric import Rubric, format_reward
from toolgym.envs.tasks.math_records import math_adapter
from toolgym.envs.types import Task
from toolgym.envs.verifiers import math_equal

SYSTEM_PROMPT = (
    "Solve the math problem. You may run Python: write a ```python code block and its printed output "
    "is returned to you. Give the final answer as \\boxed{ANSWER}."
)


def correct(completion: str, answer: str | None, task: Task) -> float:
    """1.0 when the stated answer (or, failing that, the whole final message) equals the reference."""
    return float(math_equal(answer if answer is not None else completion, task.ground_truth))


class MathTIREnv(ToolEnv):
    """Math with a Python tool. Knobs: dataset (a source string too, `toolgym.envs.tasks.catalog`; its
    options in `source_options`), split/partition, stateful python, format weight."""

    reward_range = (0.0, 1.0)

    def __init__(self, dataset: Any = "gsm8k", *, split: str | None = None, partition: str | None = None,
                 limit: int | None = None, stateful: bool = False, format_weight: float = 0.0,
                 parser: str = "hermes+python", system_prompt: str | None = SYSTEM_PROMPT, max_turns: int = 4,
                 seed: int = 0, source_options: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if isinstance(dataset, str) and dataset.startswith("rg:"):
            from toolgym.envs.builtin.reasoning_gym import rg_source

            tasks: Any = rg_source(dataset[3:], seed=seed, partition=partition)
        else:
            tasks = build_source(dataset, math_adapter, kind="math", split=split, partition=partition, seed=seed,
                                 limit=limit, options=source_options)
        funcs: list[Any] = [correct]
        if format_weight:
            funcs.append((format_reward, format_weight))
        self.reward_range = (0.0, 1.0 + max(0.0, format_weight))
        super().__init__(tasks, tools=[python_tool(stateful=stateful, limits=kwargs.get("limits"))], parser=parser,
                         rubric=Rubric(funcs), system_prompt=system_prompt, max_turns=max_turns, **kwargs)
