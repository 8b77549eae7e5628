"""An environment an author might write, whose reward function stalls on some answers.

Its reward function runs a regular expression that backtracks catastrophically when the task says
so: `(a+)+$` against `"a" * N + "b"` tries about 2**N ways in one C call that holds the GIL (N=27:
about 6 s here; 40 would run for days). Tests import it by name, so a worker process can too.
"""

from __future__ import annotations

import os
import re

from toolgym.envs.core import ToolEnv

STALL_N = 27
TASKS = [{"id": "stall", "prompt": [{"role": "user", "content": "S: 1+2?"}], "ground_truth": "3"},
         {"id": "honest", "prompt": [{"role": "user", "content": "H: 2+2?"}], "ground_truth": "4"}]


def backtracking_reward(answer, task):
    """1.0 for the right answer; on the "stall" task first a pattern that backtracks for seconds."""
    if task.id == "stall":
        re.match(r"(a+)+$", "a" * STALL_N + "b")
    return float(answer == task.ground_truth)


def where_scored(completion):
    """The id of the process it runs in (the test compares it with its own)."""
    return float(os.getpid())


def raises(answer):
    raise ValueError(f"no answer like {answer!r}")


def make_env(**kwargs) -> ToolEnv:
    from toolgym.envs.rubric import Rubric

    kwargs.setdefault("sandbox", None)
    return ToolEnv(TASKS, rubric=Rubric([backtracking_reward], sync_timeout_s=1.0), parser="hermes", **kwargs)


def with_state(state):
    """Takes the episode's state (its sandbox handle): it stays in the trainer's process."""
    return float(os.getpid())


def engine_down(answer):
    """A fault no answer could cause (its verifier service is down): the episode is not scored."""
    from toolgym.errors import InfrastructureError

    raise InfrastructureError("the verifier service is down")
