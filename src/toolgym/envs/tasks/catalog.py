"""Source strings: one way for environments and suites to name where tasks come from.

  asset:NAME[:SPLIT]         a dataset in the toolgym asset cache (gsm8k, math, math500, humaneval, mbpp,
                             leetcode, arc_challenge, arc_easy, mmlu, sciq, openbookqa); NAME may be a
                             local .jsonl file or folder in the asset schema, with options.dataset
                             naming the dataset it holds (and options.split its split)
  livecodebench:PATH         a LiveCodeBench code_generation_lite folder or file (options: since, until,
                             trust_pickle)
  codecontests:PATH          CodeContests-format JSONL/JSON/Parquet
  gpqa:PATH                  the official GPQA CSV (gpqa_diamond.csv); options shuffled by the seed
  aime:PATH                  AIME-format JSONL
  kattis:PATH                Kattis/ICPC problem packages: one package folder or a folder of them
                             (options.time_limit_s: for packages that state no time limit)

PATH may use ~ and $VARS; an unset variable raises NotConfigured (a suite skips such an entry and
reports it). MMLU keeps the subjects of options.subjects ("stem": lm-eval's STEM category).

Each KIND is a task family's name (`toolgym.envs.tasks.family`: the built-in ones above, those installed
packages declare, or `package.module:FAMILY:PATH` for a module no entry point declares), and each asset
dataset is read by the family that lists it. The family reads, and prompts, the tasks; `style` picks which of
its prompts the Tasks carry (`toolgym.envs.tasks.styles`). This module keeps no list of them.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from toolgym._jsonl import iter_jsonl
from toolgym._registry import is_reference
from toolgym.envs.sources import TaskValidationError
from toolgym.envs.tasks.family import FAMILIES, TaskFamily, families, family_of_asset
from toolgym.envs.tasks.styles import PromptStyle, check_style
from toolgym.envs.types import Task
from toolgym.errors import AssetError, ConfigError, unknown


class NotConfigured(AssetError):
    """A source whose path uses an unset environment variable (an optional entry's local file)."""


@dataclass
class Loaded:
    """The tasks of one source string: `dataset` names the family's dataset ("humaneval", "gpqa_diamond",
    "aime", ...), `kind` what its tasks are: "mc" (multiple choice), "math" (final answer) or "code";
    `family` the task family that read them (None for an environment's own tasks)."""

    dataset: str
    kind: str
    tasks: list[Task]
    family: TaskFamily | None = None


def file_kinds() -> list[str]:
    """The source kinds of local files: every family that reads them (sorted: the order families register in
    depends on which module was imported first)."""
    return sorted(f.name for f in families() if f.read is not None)


def kinds() -> list[str]:
    """Every source kind: ``asset`` and :func:`file_kinds`."""
    return ["asset", *file_kinds()]


def benchmark_datasets() -> list[str]:
    """The asset datasets a family reads (``asset:NAME``)."""
    return [a for f in families() for a in f.assets]


def _by_reference(kind: str, rest: str) -> tuple[TaskFamily, str] | None:
    """(family, what) of ``package.module:FAMILY:WHAT`` (the module imported now), else None. A registered
    family's path that holds a colon stays a path unless its first part names that module's family."""
    attr, sep, what = rest.partition(":")
    ref = f"{kind}:{attr}"
    if not (sep and what and is_reference(ref)):
        return None
    if kind in FAMILIES and ref not in FAMILIES and not isinstance(getattr(sys.modules.get(kind), attr, None),
                                                                    TaskFamily):
        return None
    return FAMILIES.find(ref), what


def is_source_string(data: Any) -> bool:
    """Whether `data` is a "KIND:..." source string of a known kind. A ``package.module:FAMILY:PATH`` imports its
    module: one that fails to load raises its one line (a mistyped module is not a file name)."""
    if not isinstance(data, str):
        return False
    kind, _, rest = data.partition(":")
    if kind != "asset" and kind not in FAMILIES:
        return _by_reference(kind, rest) is not None
    try:
        split_source(data)
    except ConfigError:
        return False
    return True


def expand(path: str) -> str:
    """`path` with ~ and $VARS expanded; NotConfigured when a variable is unset."""
    expanded = os.path.expanduser(os.path.expandvars(path))
    if "$" in expanded:
        raise NotConfigured(f"path {path!r} uses an unset environment variable")
    return expanded


def split_source(source: str) -> tuple[str, str]:
    """(kind, what) of a "KIND:WHAT" source string, KIND a family's name (or ``asset``); a family no entry point
    declares is named ``package.module:FAMILY:WHAT``. An unknown kind is the one unknown-name line."""
    kind, _, rest = source.partition(":")
    if kind == "asset" and rest:
        return kind, rest
    named = _by_reference(kind, rest)
    family, rest = named if named is not None else (FAMILIES[kind] if kind in FAMILIES else None, rest)
    if family is None or family.read is None or not rest:
        raise ConfigError(unknown("task source", kind, kinds(), f"in {source!r}: a source is KIND:WHAT"))
    return family.name, rest


def _asset(rest: str, opts: dict[str, Any]) -> tuple[str, str | None, str]:
    """(records name or local path, split, dataset) of an asset source."""
    if rest.startswith(("/", ".", "~", "$")):  # a local file or folder; split and dataset from options
        name, split = expand(rest), str(opts.get("split") or "")
        dataset = str(opts.get("dataset") or name)
    else:
        name, _, split = rest.partition(":")
        dataset = str(opts.get("dataset") or name)
    return name, split or (str(opts["split"]) if opts.get("split") else None), dataset


def dataset_of(source: str, options: dict[str, Any] | None = None) -> str | None:
    """The family dataset a source string holds, or None for an asset that is no benchmark dataset
    (an environment then reads it with its own record adapter)."""
    kind, rest = split_source(source)
    if kind != "asset":
        return FAMILIES[kind].dataset
    dataset = str(dict(options or {}).get("dataset") or rest.partition(":")[0])
    return dataset if family_of_asset(dataset) is not None else None


def load(source: str, *, style: PromptStyle = "env", options: dict[str, Any] | None = None, seed: int = 0) -> Loaded:
    """The tasks of a source string (see the module docstring), with the prompts of `style`."""
    check_style(style)
    opts = dict(options or {})
    kind, rest = split_source(source)
    if kind != "asset":
        family = FAMILIES[kind]
        assert family.read is not None  # split_source returns file kinds only
        return Loaded(family.dataset, family.kind, family.read(expand(rest), style=style, options=opts, seed=seed),
                      family)
    name, split, dataset = _asset(rest, opts)
    family = family_of_asset(dataset)
    if family is None:
        raise ConfigError(f"asset {dataset!r} is not a benchmark dataset; use one of "
                          f"{', '.join(benchmark_datasets())} (a local file: options.dataset names the dataset "
                          "it holds)")
    from toolgym import assets

    if name.endswith(".jsonl") and os.path.isfile(name):  # the user's file: a bad record is FILE:LINE, as
        numbered = list(iter_jsonl(name, error=AssetError, objects=True))  # a bad line of it is
        rows, where = [row for _, row in numbered], [f"{name}:{n}" for n, _ in numbered]
    else:
        rows, where = list(assets.load_records(name, split=split)), None
    tasks = records_tasks(family, rows, dataset=dataset, style=style, options=opts, where=where)
    return Loaded(dataset, family.kind, tasks, family)


def records_tasks(family: TaskFamily, rows: list[dict[str, Any]], *, dataset: str = "", style: PromptStyle = "env",
                  options: dict[str, Any] | None = None, where: list[str] | None = None) -> list[Task]:
    """Every kept row's Task; a bad row raises TaskValidationError naming it (as `records_to_source`):
    ``where[i]`` (a JSON Lines file's FILE:LINE) when given, else ``DATASET row I``."""
    out = []
    for i, row in enumerate(rows):
        at = where[i] if where is not None else f"{dataset or family.dataset} row {i}"
        try:
            task = family.record_task(row, i, style=style, dataset=dataset, options=options)
        except TaskValidationError as exc:
            raise TaskValidationError(f"{at}: {exc}") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise TaskValidationError(f"{at}: {type(exc).__name__}: {exc}") from None
        if task is not None:
            out.append(task)
    return out
