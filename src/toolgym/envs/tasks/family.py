"""A task family: everything toolgym knows about one dataset format, declared in one module that ends in one
:func:`register_family` call. Environments and suites reach it through its source string
(:mod:`toolgym.envs.tasks.catalog`): ``NAME:PATH`` for its local files, ``asset:DATASET`` for a cached asset.

    register_family(TaskFamily(name="aime", kind="math", task=math_task, read=load_aime))

Where families come from, so adding one touches one new file:

- every public module of ``toolgym.envs.tasks`` is imported on the first lookup (a built-in family registers
  itself when imported; a helper module registers nothing);
- installed packages declare theirs in the entry-point group ``toolgym.task_families`` (a :class:`TaskFamily`,
  or a hook that calls :func:`register_family`);
- a source string may name a module no entry point declares: ``package.module:FAMILY:PATH`` imports it.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from toolgym._registry import Registry
from toolgym.envs.types import Task
from toolgym.errors import ConfigError

log = logging.getLogger(__name__)

#: what a family's tasks are: multiple choice ("mc"), a final answer ("math") or a program ("code"). It decides
#: the grading: the rubric of the built-in environment of that kind (ScienceQA's `choice_equal`, MathTIR's
#: `math_equal`, CodeContest's sandbox judge) scores the tasks in training and in every suite mode.
TASK_KINDS = ("mc", "math", "code")

#: ``task(row, index, *, style, dataset, options) -> Task | None``: one record's Task with the prompts of
#: ``style`` ("env", "generate", "loglik"; :mod:`toolgym.envs.tasks.styles`); None leaves the record out
#: (MMLU's subject filter). A malformed record raises TaskValidationError naming the field.
RecordTask = Callable[..., "Task | None"]
#: ``read(path, *, style, options, seed) -> list[Task]``: the tasks of a local file or folder (``NAME:PATH``).
FileReader = Callable[..., "list[Task]"]


@dataclass(frozen=True)
class TaskFamily:
    """One dataset format. ``name`` is the registry key and the source kind of its local files (``NAME:PATH``,
    read by ``read``); ``assets`` are the toolgym assets whose records ``task`` turns into Tasks
    (``asset:NAME``); ``dataset`` names what its local files hold in reports (default ``name``);
    ``recognizes(row)`` says which of its datasets a bare record is (None: not this family's), for an
    environment given records without a source string; ``time_limit_s`` is the suites' per-test limit for its
    code tasks that state none."""

    name: str
    kind: str
    task: RecordTask | None = None
    read: FileReader | None = None
    assets: tuple[str, ...] = ()
    dataset: str = ""
    recognizes: Callable[[dict[str, Any]], str | None] | None = None
    time_limit_s: float | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.replace("_", "").isalnum() or self.name == "asset":
            raise ConfigError(f"task family name {self.name!r} must be a word (letters, digits, _), not 'asset'")
        if self.kind not in TASK_KINDS:
            raise ConfigError(f"task family {self.name!r}: kind must be one of {', '.join(TASK_KINDS)}, "
                              f"got {self.kind!r}")
        if self.read is None and not self.assets:
            raise ConfigError(f"task family {self.name!r} reads nothing: give it read= (local files) or assets=")
        if self.assets and self.task is None:
            raise ConfigError(f"task family {self.name!r}: assets= needs task= (how a record becomes a Task)")
        if not self.dataset:
            object.__setattr__(self, "dataset", self.name)
        object.__setattr__(self, "assets", tuple(self.assets))

    def record_task(self, row: dict[str, Any], index: int, *, style: str = "env", dataset: str = "",
                    options: dict[str, Any] | None = None) -> Task | None:
        """``task`` on one record (``dataset``: which of the family's datasets it is, default its own)."""
        if self.task is None:
            raise ConfigError(f"task family {self.name!r} reads whole files only (no task=)")
        return self.task(row, index, style=style, dataset=dataset or self.dataset, options=dict(options or {}))


class _Families(Registry[TaskFamily]):
    """The registry, which imports the built-in family modules before its first lookup."""

    _builtins_loaded = False

    def load_plugins(self, force: bool = False) -> None:
        if not _Families._builtins_loaded:
            _Families._builtins_loaded = True
            _import_builtins()
        super().load_plugins(force)


def _register_entry_point(name: str, family: TaskFamily) -> None:
    if name != family.name:
        log.warning("task family entry point %r registers a family named %r", name, family.name)
    register_family(family)  # a plug-in that takes a built-in's name is a load failure naming it


#: task families by name (see the module docstring)
FAMILIES: Registry[TaskFamily] = _Families("task family", "toolgym.task_families",
                                           accepts=lambda obj: isinstance(obj, TaskFamily),
                                           register=_register_entry_point)


def register_family(family: TaskFamily, *, override: bool = False) -> TaskFamily:
    """Make ``family`` known: ``NAME:PATH`` source strings (with ``read``) and ``asset:NAME`` for its assets.
    A name or asset another module's family holds is refused unless ``override``."""
    if not isinstance(family, TaskFamily):
        raise ConfigError(f"register_family takes a TaskFamily, got {type(family).__name__}")
    if not override:
        old = FAMILIES._entries.get(family.name)
        if old is not None and old is not family and _origin(old) != _origin(family):
            raise ConfigError(f"task family {family.name!r} is already registered (by {_origin(old)}); pass "
                              "override=True to replace it")
        for other in _registered():
            taken = set(other.assets) & set(family.assets)
            if other.name != family.name and taken:
                raise ConfigError(f"task family {family.name!r}: asset {sorted(taken)[0]!r} is read by family "
                                  f"{other.name!r} already")
    FAMILIES.add(family.name, family)
    return family


def _origin(family: Any) -> str | None:
    """The module that defines a family's functions: a module imported again (a reload, a notebook cell run
    twice) replaces its own family instead of clashing with it."""
    fn = getattr(family, "read", None) or getattr(family, "task", None)
    return getattr(fn, "__module__", None)


def _registered() -> list[TaskFamily]:
    """The families registered so far, without loading any (each once, under its own name)."""
    return [f for n, f in FAMILIES._entries.items() if isinstance(f, TaskFamily) and n == f.name]


def families() -> list[TaskFamily]:
    """Every registered family (built-ins and plug-ins), each once."""
    return [FAMILIES[n] for n in FAMILIES if FAMILIES[n].name == n]


def family_of_asset(dataset: str) -> TaskFamily | None:
    """The family whose records the asset ``dataset`` holds, or None."""
    return next((f for f in families() if dataset in f.assets), None)


def _import_builtins() -> None:
    """Import every public module of this package: each built-in family registers itself."""
    import toolgym.envs.tasks as package

    for mod in pkgutil.iter_modules(package.__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{package.__name__}.{mod.name}")
