"""EvalTask: the one normalized form every benchmark source is turned into.

Loaders (asset records, LiveCodeBench, CodeContests, GPQA, AIME) produce EvalTasks; the runner
scores them by kind: "mc" (multiple choice), "math" (final answer) or "code" (tests in a sandbox).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Kind = Literal["mc", "math", "code"]


@dataclass
class CodeTest:
    """A test of a code task: stdin/expected stdout (stdio mode); in function mode Python code run
    after the program, or a call (`call(*args)` must return `expected`, compared as JSON by the judge)."""

    input: str = ""
    output: str = ""
    code: str = ""
    call: str = ""
    args: list[Any] = field(default_factory=list)
    expected: Any = None


@dataclass
class EvalTask:
    """One benchmark problem, independent of where it came from."""

    id: str
    kind: Kind
    prompt: str  # the user message for generate/tools modes
    # multiple choice
    context: str = ""  # log-likelihood context (lm-eval format)
    choices: list[str] = field(default_factory=list)  # continuations scored in loglik mode
    labels: list[str] = field(default_factory=list)  # "A", "B", ... for generate mode
    options: list[str] = field(default_factory=list)  # the option texts shown in generate mode
    gold: int = -1
    # math
    answer: str = ""
    # code
    tests: list[CodeTest] = field(default_factory=list)
    test_mode: Literal["function", "stdio"] = "function"
    program_prefix: str = ""  # e.g. the HumanEval prompt, prepended when a completion lacks the function
    entry_point: str = ""
    time_limit_s: float = 6.0  # per test
    judge_options: dict[str, Any] = field(default_factory=dict)  # extra judge() keywords (Kattis validators)
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def reference(self) -> str:
        """The ground truth as text (for records)."""
        if self.kind == "mc":
            return self.labels[self.gold] if 0 <= self.gold < len(self.labels) else str(self.gold)
        if self.kind == "math":
            return self.answer
        return f"{len(self.tests)} tests"
