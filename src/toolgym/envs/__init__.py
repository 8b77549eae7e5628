"""toolgym.envs: Gymnasium-style multi-turn tool environments.

Public names load lazily so `import toolgym.envs` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

from toolgym._moved import alias_modules

alias_modules({"toolgym.envs.kattis": "toolgym.envs.tasks.kattis"})  # its old import path
alias_modules({"toolgym.envs.offloop": "toolgym.envs.scoring.offloop",  # the scoring modules' old paths
               "toolgym.envs.scorer_guard": "toolgym.envs.scoring.guard",
               "toolgym.envs.scorer_worker": "toolgym.envs.scoring.scorer_worker",
               "toolgym.envs.reward_pool": "toolgym.envs.scoring.reward_pool"})

_LAZY = {
    "ToolEnv": "toolgym.envs.core",
    "EnvStateError": "toolgym.envs.core",
    "Task": "toolgym.envs.types",
    "Tool": "toolgym.envs.tools",
    "ToolContext": "toolgym.envs.tools",
    "tool": "toolgym.envs.tools",
    "Rubric": "toolgym.envs.rubric",
    "RubricResult": "toolgym.envs.rubric",
    "LLMJudge": "toolgym.envs.judge",
    "make": "toolgym.envs.registry",
    "make_env": "toolgym.envs.registry",
    "register": "toolgym.envs.registry",
    "spec": "toolgym.envs.registry",
    "list_envs": "toolgym.envs.registry",
    "UnknownEnvError": "toolgym.envs.registry",
    "HermesParser": "toolgym.envs.parsing",
    "PythonBlockParser": "toolgym.envs.parsing",
    "CombinedParser": "toolgym.envs.parsing",
    "ToolCallParser": "toolgym.envs.parsing",
    "extract_answer": "toolgym.envs.answers",
    "math_equal": "toolgym.envs.verifiers",
    "choice_equal": "toolgym.envs.verifiers",
    "TaskSource": "toolgym.envs.sources",
    "ListSource": "toolgym.envs.sources",
    "GeneratorSource": "toolgym.envs.sources",
    "TaskValidationError": "toolgym.envs.sources",
    "load_source": "toolgym.envs.sources",
    "read_records": "toolgym.envs.sources",
    "python_tool": "toolgym.envs.builtin_tools",
    "calculator_tool": "toolgym.envs.builtin_tools",
    "run_tests_tool": "toolgym.envs.builtin.run_tests",
    "check_env": "toolgym.envs.checker",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'toolgym.envs' has no attribute {name!r}")
