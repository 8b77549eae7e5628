"""toolgym/Program-v0: an agent program as an environment. Its task runs the program (a Python file written
against the OpenAI API) against a recording proxy; its reward is a rubric on what the program prints.

Why an environment: a run names it like any other (``rollout.env`` or a mixture entry, ``env_kwargs``), its
tasks come from a task source (another environment's, e.g. Arith's, or a dataset) and its reward from a
rubric, so ``toolgym train`` trains the program's turns like any rollout. The program decides its own turns,
so the rollout runner does not step it: :mod:`toolgym.agents.program_episode` runs it (the trainer's
orchestrator asks that module for a runner whenever the environment is a ``ProgramEnv``).

Stepping it directly (``reset`` then one ``step``) scores the text given as if the program had printed it:
what ``toolgym envs check`` and SFT demonstrations need, and a one-turn fallback for tools that step envs.

What the program gets: its ``args`` with ``{question}`` replaced by the task's last user message, and the task's
id and prompt (never its ground truth) as JSON in ``TOOLGYM_TASK``. What it prints is the outcome.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium

from toolgym.envs.answers import extract_answer
from toolgym.envs.rubric import Rubric
from toolgym.envs.sources import load_source
from toolgym.envs.spaces import Messages
from toolgym.envs.types import Task
from toolgym.envs.verifiers import math_equal
from toolgym.errors import ConfigError


def correct_answer(answer: str | None, task: dict[str, Any]) -> float:
    """1 when the answer the program printed equals the task's ground truth (``math_equal``)."""
    truth = task.get("ground_truth")
    return float(answer is not None and truth is not None and math_equal(answer, str(truth)))


@dataclass(frozen=True)
class ProgramSpec:
    """How to run the program: the host file, its arguments (``{question}`` filled per task), whether it is
    trusted (a limited child process) or not (a jail), its limits and how many run at once."""

    program: str
    args: tuple[str, ...]
    trusted: bool
    memory_mb: int
    timeout_s: float
    max_concurrent: int
    python_blocks: bool = False

    def argv(self, question: str, program_path: str | None = None) -> list[str]:
        """The command for one task (``program_path``: where the file is seen, inside a jail)."""
        return [sys.executable, program_path or self.program, *(a.replace("{question}", question) for a in self.args)]


class ProgramEnv(gymnasium.Env):
    """``program``: a Python file (run by this interpreter, so it imports what this environment has).
    ``tasks_from``/``tasks_kwargs``: the environment whose task source to use; or ``dataset``: task records.
    ``reward``: ``"module:function"`` (a rubric function of ``completion``, ``answer``, ``task``, ``messages``),
    default: the printed answer equals the ground truth (``reward_range``: what it may return, default 0..1).
    ``tools``: the tool schemas (or names) the program
    offers, shown on ``reset`` (SFT demonstrations render them as the program's requests do).
    ``python_blocks``: fenced ```python blocks in the model's text are calls to the program's ``python`` tool
    when the model's own format finds none (as in the built-in environments; the Arith demo model's format).
    ``trusted``: false (default) runs it in a jail (no network, its own mounts and uid); true only for a
    program you wrote."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, program: str, args: list[str] | tuple[str, ...] = ("{question}",),
                 tasks_from: str | None = "toolgym/Arith-v0", tasks_kwargs: dict[str, Any] | None = None,
                 dataset: Any = None, reward: str | None = None, tools: list[Any] | None = None,
                 trusted: bool = False, memory_mb: int = 2048, timeout_s: float = 120.0, max_concurrent: int = 8,
                 python_blocks: bool = False, reward_range: tuple[float, float] | list[float] = (0.0, 1.0),
                 partition: str = "train", sandbox: Any = None, seed: int | None = None,
                 max_turns: int = 1) -> None:
        path = Path(str(program)).expanduser()
        if not path.is_file() or path.suffix != ".py":
            raise ConfigError(f"Program-v0: program {str(program)!r} must be an existing Python file")
        if not isinstance(args, (list, tuple)) or not all(isinstance(a, str) for a in args):
            raise ConfigError("Program-v0: args must be a list of strings")
        if not isinstance(trusted, bool):
            raise ConfigError("Program-v0: trusted must be true or false")
        if not (memory_mb >= 64 and timeout_s > 0 and max_concurrent >= 1):
            raise ConfigError("Program-v0: needs memory_mb >= 64, timeout_s > 0 and max_concurrent >= 1")
        self.program = ProgramSpec(str(path.resolve()), tuple(args), trusted, int(memory_mb), float(timeout_s),
                                   int(max_concurrent), bool(python_blocks))
        self.source = self._source(dataset, tasks_from, tasks_kwargs, partition)
        lo, hi = (float(x) for x in reward_range)
        self.reward_range = (lo, hi)
        self.rubric = Rubric([_load_reward(reward) if reward else correct_answer], range=(lo, hi), isolate=False)
        self.tools = [_schema(t) for t in tools or []]
        self.task: Task | None = None
        self.observation_space = Messages()
        self.action_space = gymnasium.spaces.Text(max_length=1 << 20)

    @staticmethod
    def _source(dataset: Any, tasks_from: str | None, tasks_kwargs: dict[str, Any] | None, partition: str) -> Any:
        if dataset is not None:
            return load_source(dataset, split=partition)
        if not tasks_from:
            raise ConfigError("Program-v0: give tasks_from (an environment id) or dataset (task records)")
        from toolgym.envs.registry import make_env

        env = make_env(tasks_from, dict(tasks_kwargs or {}), sandbox=None, partition=partition)
        try:
            src = getattr(env.unwrapped, "source", None)
        finally:
            env.close()
        if src is None:
            raise ConfigError(f"Program-v0: environment {tasks_from!r} has no task source to borrow")
        return src

    def task_at(self, index: int) -> Task:
        return self.source.get(int(index))

    @staticmethod
    def question(task: Task) -> str:
        users = [m.get("content") for m in task.prompt if m.get("role") == "user"]
        return str(users[-1] if users else "")

    @staticmethod
    def program_view(task: Task) -> dict[str, Any]:
        """What the program may see of a task: its id and prompt, never the ground truth."""
        return {"id": task.id, "prompt": task.prompt}

    # -- stepped directly: the text is the outcome -----------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        index = (options or {}).get("index", seed or 0)
        self.task = self.task_at(index)
        info = {"task_id": self.task.id, "metadata": dict(self.task.metadata), "tools": self.tools}
        return [dict(m) for m in self.task.prompt], info

    def step(self, action: str) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        if self.task is None:
            from toolgym.envs.core import EnvStateError

            raise EnvStateError("call reset() before step()")
        text = action if isinstance(action, str) else str(action)
        result = self.rubric.score(completion=text, answer=extract_answer(text), task=self.task.to_dict(),
                                   messages=[*self.task.prompt, {"role": "assistant", "content": text}])
        self.task = None
        return [], float(result.total), True, False, {"reward_components": dict(result.components),
                                                      "finish_reason": "answer"}


def _schema(tool: Any) -> dict[str, Any]:
    if isinstance(tool, str):
        return {"type": "function", "function": {"name": tool, "parameters": {"type": "object", "properties": {}}}}
    if isinstance(tool, dict):
        return tool
    raise ConfigError("Program-v0: tools must be tool schemas or names")


def _load_reward(ref: str) -> Any:
    import importlib

    mod, _, name = str(ref).partition(":")
    try:
        fn = getattr(importlib.import_module(mod), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"Program-v0: reward {ref!r} is not an importable module:function ({exc})") from None
    if not callable(fn):
        raise ConfigError(f"Program-v0: reward {ref!r} is not callable")
    return fn


def is_program_env(env_id: str) -> bool:
    """Whether a registered id builds a ProgramEnv (without building it)."""
    from gymnasium.envs.registration import load_env_creator

    from toolgym.envs.registry import spec

    ep = spec(env_id).entry_point
    cls = load_env_creator(ep) if isinstance(ep, str) else ep
    return isinstance(cls, type) and issubclass(cls, ProgramEnv)
