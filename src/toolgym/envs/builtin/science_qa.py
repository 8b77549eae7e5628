"""toolgym/ScienceQA-v0: multiple-choice science questions, optionally with a Python tool.

Tasks: ARC-Challenge (default), ARC-Easy, MMLU (STEM subjects by default), SciQ, OpenBookQA
from the asset cache, or a GPQA-format local CSV (`Question`, `Correct Answer`,
`Incorrect Answer 1..3`; options shuffled with a per-question seed), or any source string
(`toolgym.envs.tasks.catalog`: "gpqa:PATH", "asset:mmlu", ...). Reward: 1 when the chosen
letter (in any common format, or the option's text) is the correct one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolgym.envs.builtin.datasets import build_source
from toolgym.envs.builtin_tools import python_tool
from toolgym.envs.core import ToolEnv
from toolgym.envs.rubric import Rubric
from toolgym.envs.sources import ListSource
from toolgym.envs.tasks import multiple_choice
from toolgym.envs.tasks.multiple_choice import format_question as format_question
from toolgym.envs.tasks.multiple_choice import mc_adapter
from toolgym.envs.types import Task
from toolgym.envs.verifiers import choice_equal

SYSTEM_PROMPT = "Answer the multiple-choice question. End with the letter of the correct option as \\boxed{LETTER}."
TOOL_PROMPT = SYSTEM_PROMPT + " You may run Python by writing a ```python code block; its output is returned."
MMLU_STEM = frozenset(multiple_choice.MMLU_STEM)  # lm-eval's "stem" category, as the suites use it


def choice_correct(answer: str | None, completion: str, task: Task) -> float:
    """1.0 when the chosen option is the reference letter."""
    m = task.metadata
    return float(choice_equal(answer if answer is not None else completion, task.ground_truth,
                              labels=m.get("labels"), choices=m.get("choices")))


class ScienceQAEnv(ToolEnv):
    """Multiple-choice science. `subjects="stem"` (default for MMLU) keeps MMLU's STEM subjects."""

    reward_range = (0.0, 1.0)

    def __init__(self, dataset: Any = "arc_challenge", *, split: str | None = None, partition: str | None = None,
                 subjects: str | list[str] | None = "stem", limit: int | None = None, tools: bool = False,
                 max_turns: int | None = None, system_prompt: str | None = None, parser: str = "hermes+python",
                 seed: int = 0, source_options: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if isinstance(dataset, (str, Path)) and str(dataset).lower().endswith(".csv") and ":" not in str(dataset):
            dataset = f"gpqa:{dataset}"  # options shuffled by this env's seed, as the suites shuffle them
        elif dataset == "mmlu":
            dataset = "asset:mmlu"
        tasks = build_source(dataset, mc_adapter, kind="mc", split=split, partition=partition, seed=seed,
                             options={"subjects": subjects, **(source_options or {})})
        if limit is not None:
            tasks = ListSource([tasks.get(i) for i in range(min(limit, tasks.size or limit))], name=tasks.name)
        tool_list = [python_tool(limits=kwargs.get("limits"))] if tools else []
        super().__init__(tasks, tools=tool_list, parser=parser, rubric=Rubric([choice_correct]),
                         system_prompt=system_prompt or (TOOL_PROMPT if tools else SYSTEM_PROMPT),
                         max_turns=max_turns or (4 if tools else 1), **kwargs)
