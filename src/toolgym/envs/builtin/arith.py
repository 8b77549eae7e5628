"""toolgym/Arith-v0: exact multi-digit arithmetic with a Python tool.

Small models get products of 4-5 digit numbers wrong in their heads and right with the tool,
so the reward separates tool use from guessing. Prompts are short and the answer format is
one line (`Answer: 123`), for a CPU RL demo with a tiny model. Seeded and unbounded.

``parts=K`` chains K independent expressions in one episode: each answer line (`Answer: 56`) is followed
by the next question as a user turn, and the reward comes only at the end (the fraction of parts answered
right, or 1 only when all are with ``part_reward="all"``). The outcome then depends on K separate decisions
(use the tool for this part or guess), taken one after another over one long multi-turn response, the
regime CTPO's position-adaptive window is meant for. Each part looks exactly like a one-part task, so a
model that can do one part can do all of them.
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
    parts: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.min_digits <= self.max_digits <= 30:
            raise ConfigError(f"Arith digits must satisfy 1 <= min_digits <= max_digits <= 30, got {self.min_digits}..{self.max_digits}")
        if not 2 <= self.terms <= 6:
            raise ConfigError(f"Arith terms must be in 2..6, got {self.terms}")
        if not self.ops or set(self.ops) - set("+-*"):
            raise ConfigError(f"Arith ops must be a non-empty subset of '+-*', got {self.ops!r}")
        if not 1 <= self.parts <= 8:
            raise ConfigError(f"Arith parts must be in 1..8, got {self.parts}")


def generate(index: int, seed: int, cfg: ArithConfig) -> Task:
    """Task number `index` of the stream for `seed`: the same pair always gives the same problem."""
    rng = random.Random(f"arith:{seed}:{index}")
    if cfg.parts == 1:
        expr, value = _expression(rng, cfg)
        return Task(id=f"arith-{seed}-{index}", prompt=[{"role": "user", "content": f"What is {expr}?"}],
                    ground_truth=str(value),
                    metadata={"source": "arith", "expression": expr, "difficulty": asdict(cfg), "seed": seed, "index": index})
    pairs = [_expression(rng, cfg) for _ in range(cfg.parts)]
    exprs = [e for e, _ in pairs]
    return Task(id=f"arith-{seed}-{index}", prompt=[{"role": "user", "content": question(exprs[0])}],
                ground_truth=PART_SEPARATOR.join(str(v) for _, v in pairs),
                metadata={"source": "arith", "expressions": exprs, "difficulty": asdict(cfg), "seed": seed, "index": index})


PART_SEPARATOR = "; "


def question(expr: str) -> str:
    return f"What is {expr}?"


def _expression(rng: random.Random, cfg: ArithConfig) -> tuple[str, int]:
    nums = [rng.randint(10 ** (d - 1) if d > 1 else 0, 10**d - 1)
            for d in (rng.randint(cfg.min_digits, cfg.max_digits) for _ in range(cfg.terms))]
    ops = [rng.choice(cfg.ops) for _ in range(cfg.terms - 1)]
    expr = str(nums[0])
    for op, n in zip(ops, nums[1:], strict=False):
        expr += f" {op} {n}"
    return expr, _evaluate(nums, ops)


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


def arith_correct(answer: str | None, task: Task, state: dict[str, Any] | None = None) -> float:
    """1.0 for the exact integer (thousands separators and a trailing period allowed); with several parts,
    the fraction of parts whose answer was the exact integer (earlier parts' answers are in ``state``)."""
    return _part_scores(answer, task, state) if task.ground_truth is not None else 0.0


def arith_all_correct(answer: str | None, task: Task, state: dict[str, Any] | None = None) -> float:
    """1.0 only when every part's answer was the exact integer."""
    return float(task.ground_truth is not None and _part_scores(answer, task, state) == 1.0)


def _part_scores(answer: str | None, task: Task, state: dict[str, Any] | None) -> float:
    truths = str(task.ground_truth).split(PART_SEPARATOR.strip())
    given = [*(state or {}).get(PART_ANSWERS, []), answer][: len(truths)]
    right = sum(a is not None and math_equal(a, t.strip(), rel_tol=0.0) for a, t in zip(given, truths, strict=False))
    return right / len(truths)


PART_ANSWERS = "arith_part_answers"  # per-episode state: the answers given to the parts before the current one


class ArithEnv(ToolEnv):
    """Exact arithmetic with the Python tool. Partition "test" draws from a disjoint seed."""

    reward_range = (0.0, 1.0)

    def __init__(self, *, min_digits: int = 3, max_digits: int = 5, terms: int = 2, ops: str = "+-*", parts: int = 1, seed: int = 0,
                 partition: str | None = None, format_weight: float = 0.0, max_turns: int = 3, part_reward: str = "fraction",
                 parser: str = "hermes+python", system_prompt: str | None = SYSTEM_PROMPT, **kwargs: Any) -> None:
        self.config = ArithConfig(min_digits, max_digits, terms, ops, parts)
        if partition not in (None, "train", "test"):
            raise ConfigError(f"partition must be 'train', 'test' or None, got {partition!r}")
        stream = seed + (1_000_003 if partition == "test" else 0)
        cfg = self.config
        source = GeneratorSource(lambda i: generate(i, stream, cfg), name=f"arith-{stream}")
        if part_reward not in ("fraction", "all"):
            raise ConfigError(f"part_reward must be 'fraction' or 'all', got {part_reward!r}")
        if parts > 1 and max_turns < 2 * parts:
            raise ConfigError(f"Arith with {parts} parts needs max_turns >= {2 * parts} (a tool turn and an answer "
                              f"turn per part), got {max_turns}")
        funcs: list[Any] = [arith_all_correct if part_reward == "all" else arith_correct]
        if format_weight:
            funcs.append((format_reward, format_weight))
        self.reward_range = (0.0, 1.0 + max(0.0, format_weight))
        super().__init__(source, tools=[python_tool(limits=kwargs.get("limits"))], parser=parser,
                         rubric=Rubric(funcs), system_prompt=system_prompt, max_turns=max_turns, **kwargs)

    async def on_final(self, text: str, parsed: Any) -> list[dict[str, Any]] | None:
        """A multi-part episode goes on after each part's answer with the next part's question."""
        exprs = (self.task.metadata or {}).get("expressions") if self.task is not None else None
        if not exprs:
            return None
        answers = self._ctx.state.setdefault(PART_ANSWERS, [])
        if len(answers) + 1 >= len(exprs):
            return None  # this was the last part: the episode ends and is scored
        answers.append(parsed.answer)
        return [{"role": "user", "content": question(exprs[len(answers)])}]
