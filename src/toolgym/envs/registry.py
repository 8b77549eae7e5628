"""Environment registry on top of Gymnasium's: namespaced, versioned ids (`ns/Name-vN`), lazy
`"module:Class"` entry points, third-party packages through the entry-point group `toolgym.envs`,
and unknown ids answered with close matches.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

import gymnasium
from gymnasium.envs.registration import EnvSpec

from toolgym._plugins import load_entry_points
from toolgym.errors import ConfigError, ToolgymError, unknown

ENTRY_POINT_GROUP = "toolgym.envs"

BUILTIN: dict[str, str] = {
    "toolgym/MathTIR-v0": "toolgym.envs.tasks.math_tir:MathTIREnv",
    "toolgym/CodeContest-v0": "toolgym.envs.tasks.code_contest:CodeContestEnv",
    "toolgym/ScienceQA-v0": "toolgym.envs.tasks.science_qa:ScienceQAEnv",
    "toolgym/ReasoningGym-v0": "toolgym.envs.tasks.reasoning_gym:ReasoningGymEnv",
    "toolgym/Arith-v0": "toolgym.envs.tasks.arith:ArithEnv",
}

_loaded = False
_ours: set[str] = set()
plugin_errors: dict[str, str] = {}


class UnknownEnvError(ToolgymError, KeyError):
    """No environment with this id; the message suggests close matches."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


def register(id: str, entry_point: Any, *, kwargs: dict[str, Any] | None = None, override: bool = False, **spec: Any) -> None:
    """Register an environment id (`ns/Name-vN`) for `toolgym.make`.

    `entry_point` is a `"module:Class"` string (imported lazily at make time) or a callable.
    Re-registering an id needs override=True, so two plugins cannot silently shadow each other.
    """
    _check_id(id)
    if id in gymnasium.registry and not override:
        existing = gymnasium.registry[id].entry_point
        if existing == entry_point:
            return
        raise ConfigError(f"environment {id!r} is already registered (entry point {existing!r}); pass override=True to replace it")
    if id in gymnasium.registry:
        del gymnasium.registry[id]
    gymnasium.register(id=id, entry_point=entry_point, kwargs=kwargs or {}, order_enforce=False,
                       disable_env_checker=True, **spec)
    _ours.add(id)


def _check_id(id: str) -> None:
    import re

    if not isinstance(id, str) or not re.fullmatch(r"[\w.-]+/[\w.:-]+-v\d+", id):
        raise ConfigError(f"environment id {id!r} must look like 'namespace/Name-v0'")


def load_plugins(force: bool = False) -> None:
    """Register the built-ins and every entry point in the `toolgym.envs` group (once).

    An entry point named like an id (`myorg/MyEnv-v0 = mypkg.envs:MyEnv`) registers lazily;
    any other name is a hook `fn()` that calls `toolgym.register` itself. A broken plugin is
    recorded in `plugin_errors` (shown by `toolgym envs list`) instead of breaking every make().
    """
    global _loaded
    if _loaded and not force:
        return
    _loaded = True
    for env_id, ep in BUILTIN.items():
        if env_id not in gymnasium.registry:
            register(env_id, ep)
    load_entry_points(ENTRY_POINT_GROUP, _load_env_entry_point, plugin_errors)


def _load_env_entry_point(ep: metadata.EntryPoint) -> None:
    if "/" in ep.name:
        if ep.name not in gymnasium.registry:
            register(ep.name, ep.value)
    else:
        ep.load()()

def spec(id: str) -> EnvSpec:
    """The EnvSpec of a registered id; unknown ids raise UnknownEnvError with suggestions."""
    load_plugins()
    if id not in gymnasium.registry:
        raise UnknownEnvError(_unknown_message(id))
    return gymnasium.registry[id]


def make(id: str, **kwargs: Any) -> gymnasium.Env:
    """Create a registered environment; kwargs go to its constructor (e.g. sandbox=, max_turns=)."""
    s = spec(id)
    return gymnasium.make(s, **kwargs)


def list_envs(namespace: str | None = None, toolgym_only: bool = True) -> list[str]:
    """Registered ids, sorted: built-ins and plugins (all of Gymnasium's with toolgym_only=False)."""
    load_plugins()
    ids = sorted(i for i in gymnasium.registry if (not toolgym_only or i in _ours))
    if namespace is not None:
        ids = [i for i in ids if i.startswith(namespace + "/")]
    return ids


def _unknown_message(id: str) -> str:
    return unknown("environment", id, list_envs())
