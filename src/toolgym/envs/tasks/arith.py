"""toolgym/Arith-v0: exact multi-digit arithmetic with a Python tool.

Small models get products of 4-5 digit numbers wrong in their heads and right with the tool,
so the reward separates tool use from guessing. Prompts are short and the answer format is
one line (`Answer: 123`), for a CPU RL demo with a tiny model. Seeded and unbounded.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

from toolgym.envs.builtin_tools import python_tool
from toolgym.envs.core import ToolEnv
from toolgym.envs.rubric import Rubric, format_reward
from toolgym.envs.sources import GeneratorSource
from toolgym.envs.types import Task
from toolgym.envs.verifiers import math_equal
from toolgym.errors import ConfigError

SYSTEM_PROMPT = "Use Python to compute exactly: write ```python\nprint(...)\n```. Then reply: Answer: <number>"


@dataclass(frozen=True)
class ArithConfig:
    """Difficulty knobs: digits per operand (inclusive range), number of operands, operators."""

    min_digits: int = 3
    max_digits: int = 5
    terms: int = 2
    ops: str = "+-*"

    def __post_init__(self) -> None:
        if not 1 <= self.min_digits <= self.max_digits <= 30:
            raise ConfigError(f"Arith digits must satisfy 1 <= min_digits <= max_digits <= 30, got {self.min_digits}..{self.max_digits}")
        if not 2 <= self.terms <= 6:
            raise ConfigError(f"Arith terms must be in 2..6, got {self.terms}")
        if not self.ops or set(self.ops) - set("+-*"):
            raise ConfigError(f"Arith ops must be a non-empty subset of '+-*', got {self.ops!r}")


def generate(index: int, seed: int, cfg: ArithConfig) -> Task:
    """Task number `index` of the stream for `seed`: the same pair always gives the same problem."""
    rng = random.Random(f"arith:{seed}:{index}")
    nums = [rng.randint(10 ** (d - 1) if d > 1 else 0, 10**d - 1)
            for d in (rng.randint(cfg.min_digits, cfg.max_digits) for _ in range(cfg.terms))]
    ops = [rng.choice(cfg.ops) for _ in range(cfg.terms - 1)]
    expr = str(nums[0])
    for op, n in zip(ops, nums[1:], strict=False):
        expr += f" {op} {n}"
    value = _evaluate(nums, ops)
    return Task(id=f"arith-{seed}-{index}", prompt=[{"role": "user", "content": f"What is {expr}?"}],
                ground_truth=str(value),
                metadata={"source": "arith", "expression": expr, "difficulty": asdict(cfg), "seed": seed, "index": index})


def _evaluate(nums: list[int], ops: list[str]) -> int:
    """Integer evaluation with the usual precedence (* before + and -), without eval()."""
    terms = [nums[0]]
    signs = [1]
    for op, n in zip(ops, nums[1:], strict=False):
        if op == "*":
            terms[-1] *= n
        else:
            terms.append(n)
            signs.append(1 if op == "+" else -1)
    return sum(s * t for s, t in zip(signs, terms, strict=False))


def arith_correct(answer: str | None, task: Task) -> float:
    """1.0 for the exact integer (thousands separators and a trailing period allowed)."""
    return float(answer is not None and math_equal(answer, task.ground_truth, rel_tol=0.0))


class ArithEnv(ToolEnv):
    """Exact arithmetic with the Python tool. Partition "test" draws from a disjoint seed."""

    reward_range = (0.0, 1.0)

    def __init__(self, *, min_digits: int = 3, max_digits: int = 5, terms: int = 2, ops: str = "+-*", seed: int = 0,
                 partition: str | None = None, format_weight: float = 0.0, max_turns: int = 3,
                 parser: str = "hermes+python", system_prompt: str | None = SYSTEM_PROMPT, **kwargs: Any) -> None:
        self.config = ArithConfig(min_digits, max_digits, terms, ops)
        if partition not in (None, "train", "test"):
            raise ConfigError(f"partition must be 'train', 'test' or None, got {partition!r}")
        stream = seed + (1_000_003 if partition == "test" else 0)
        cfg = self.config
        source = GeneratorSource(lambda i: generate(i, stream, cfg), name=f"arith-{stream}")
        funcs: list[Any] = [arith_correct]
        if format_weight:
            funcs.append((format_reward, format_weight))
        self.reward_range = (0.0, 1.0 + max(0.0, format_weight))
        super().__init__(source, tools=[python_tool(limits=kwargs.get("limits"))], parser=parser,
                         rubric=Rubric(funcs), system_prompt=system_prompt, max_turns=max_turns, **kwargs)
