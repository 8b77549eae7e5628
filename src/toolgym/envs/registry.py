"""Environment registry on top of Gymnasium's: namespaced, versioned ids (`ns/Name-vN`), lazy
`"module:Class"` entry points, third-party packages through the entry-point group `toolgym.envs`,
and unknown ids answered with close matches.
"""

from __future__ import annotations

import threading
from importlib import metadata
from typing import Any

import gymnasium
from gymnasium.envs.registration import EnvSpec

from toolgym._plugins import broken_note, load_entry_points, load_failure
from toolgym._registry import import_reference, is_reference
from toolgym.errors import ConfigError, ToolgymError, unknown

ENTRY_POINT_GROUP = "toolgym.envs"

BUILTIN: dict[str, str] = {
    "toolgym/MathTIR-v0": "toolgym.envs.builtin.math_tir:MathTIREnv",
    "toolgym/CodeContest-v0": "toolgym.envs.builtin.code_contest:CodeContestEnv",
    "toolgym/ScienceQA-v0": "toolgym.envs.builtin.science_qa:ScienceQAEnv",
    "toolgym/ReasoningGym-v0": "toolgym.envs.builtin.reasoning_gym:ReasoningGymEnv",
    "toolgym/Arith-v0": "toolgym.envs.builtin.arith:ArithEnv",
    "toolgym/Program-v0": "toolgym.envs.program:ProgramEnv",
}

_loaded = False
_load_lock = threading.RLock()
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
    # Locked: episodes build their envs on threads, and in a fresh process (a rollout worker) the first two
    # would race: one saw _loaded set while the other was still registering, and failed as an unknown id.
    # Reentrant: a hook that calls toolgym.make goes on.
    with _load_lock:
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
    """The EnvSpec of a registered id; unknown ids raise UnknownEnvError with suggestions.

    As in Gymnasium, `"module:ns/Name-v0"` first imports `module` (installed, or a .py file in the current
    folder) so that its `toolgym.register(...)` runs: how a config or `toolgym train` names an environment
    that is registered by a script rather than by an installed package."""
    load_plugins()
    id = _import_prefix(id)
    if id not in gymnasium.registry:
        raise UnknownEnvError(_unknown_message(id))
    return gymnasium.registry[id]


def make(id: str, **kwargs: Any) -> gymnasium.Env:
    """Create a registered environment; kwargs go to its constructor (e.g. sandbox=, max_turns=)."""
    s = spec(id)
    if isinstance(s.entry_point, str) and is_reference(s.entry_point):  # a plug-in's, imported now: named if broken
        try:
            import_reference(s.entry_point)
        except Exception as exc:
            raise ConfigError(load_failure("environment", s.id, s.entry_point, exc)) from None
    return gymnasium.make(s, **kwargs)


def _import_prefix(id: str) -> str:
    """`id` without its `module:` prefix, after importing that module (see `spec`)."""
    module, sep, rest = str(id).partition(":")
    if not sep or "/" in module or not module:
        return id
    import importlib
    import os
    import sys

    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())  # after installed packages: a local file never shadows one
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(f"environment {id!r}: cannot import module {module!r} ({exc}); it must be installed or "
                          "a .py file in the current folder") from None
    return rest


# What toolgym itself may pass to an environment's constructor, beside the user's env_kwargs.
RUN_ARGUMENTS = ("sandbox", "partition", "dataset", "seed")
_UNSET: Any = object()


def make_env(id: str, env_kwargs: dict[str, Any] | None = None, *, sandbox: Any = _UNSET, partition: str | None = None,
             dataset: Any = None, seed: int | None = None) -> gymnasium.Env:
    """The one way toolgym builds an environment for a run: the trainer, the rollout runner, SFT, the suites,
    the Ray workers and TRL all call this, and `toolgym envs check` builds its environments with it, so a
    checker pass means a run can make the environment.

    `env_kwargs` are the user's (a config's `rollout.env_kwargs`, `-k` options); `sandbox` (an open sandbox to
    borrow, a backend name, or None), `partition` ("train" | "test"), `dataset` (tasks that replace the env's
    own) and `seed` are passed only when given. A constructor that refuses one of them is a one-line
    ConfigError naming it, not a TypeError from deep inside a run."""
    kwargs = dict(env_kwargs or {})
    run_args = {"sandbox": sandbox, "partition": partition, "dataset": dataset, "seed": seed}
    for name, value in run_args.items():
        if value is not _UNSET and (value is not None or name == "sandbox"):  # sandbox=None: no sandbox
            kwargs.setdefault(name, value)
    try:
        return make(id, **kwargs)
    except TypeError as exc:
        refused = _refused_argument(exc, kwargs)
        if refused is None:
            raise
        origin = "toolgym passes it" if refused in RUN_ARGUMENTS and refused not in (env_kwargs or {}) else "it is in env_kwargs"
        raise ConfigError(
            f"environment {id!r} does not accept {refused}= ({origin}); its constructor should take **kwargs and pass "
            f"them to ToolEnv.__init__ (toolgym may pass {', '.join(a + '=' for a in RUN_ARGUMENTS)})") from None


def _refused_argument(exc: TypeError, kwargs: dict[str, Any]) -> str | None:
    """The keyword a constructor's TypeError names, when it is one we passed."""
    import re

    m = re.search(r"(?:unexpected keyword argument|multiple values for (?:keyword )?argument) '(\w+)'", str(exc))
    return m.group(1) if m and m.group(1) in kwargs else None


def list_envs(namespace: str | None = None, toolgym_only: bool = True) -> list[str]:
    """Registered ids, sorted: built-ins and plugins (all of Gymnasium's with toolgym_only=False)."""
    load_plugins()
    ids = sorted(i for i in gymnasium.registry if (not toolgym_only or i in _ours))
    if namespace is not None:
        ids = [i for i in ids if i.startswith(namespace + "/")]
    return ids


def _unknown_message(id: str) -> str:
    return unknown("environment", id, list_envs(), broken_note(id, plugin_errors))
