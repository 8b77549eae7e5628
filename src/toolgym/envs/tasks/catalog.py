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

Every kind is read, and prompted, by its task family module (`function_sets`, `livecodebench`,
`codecontests`, `multiple_choice`, `gpqa`, `math_records`, `toolgym.envs.kattis`); `style` picks which of
the family's prompts the Tasks carry (`toolgym.envs.tasks.styles`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from toolgym._jsonl import iter_jsonl
from toolgym.envs.sources import TaskValidationError
from toolgym.envs.tasks import codecontests, function_sets, gpqa, livecodebench, math_records, multiple_choice
from toolgym.envs.tasks.styles import PromptStyle, check_style
from toolgym.envs.types import Task
from toolgym.errors import AssetError, ConfigError, unknown

KINDS = ("asset", "livecodebench", "codecontests", "gpqa", "aime", "kattis")
MC_DATASETS = ("arc_challenge", "arc_easy", "mmlu", "sciq", "openbookqa")
MATH_DATASETS = ("gsm8k", "math", "math500")
CODE_DATASETS = tuple(function_sets.TASKS)
# The dataset family each kind of local file holds, and what its tasks are ("mc", "math" or "code").
FILE_DATASETS = {"livecodebench": "livecodebench", "codecontests": "codecontests", "gpqa": "gpqa_diamond",
                 "aime": "aime", "kattis": "kattis"}
TASK_KIND = {**dict.fromkeys(MC_DATASETS + ("gpqa_diamond",), "mc"), **dict.fromkeys(MATH_DATASETS + ("aime",), "math"),
             **dict.fromkeys(CODE_DATASETS + ("livecodebench", "codecontests", "kattis"), "code")}


class NotConfigured(AssetError):
    """A source whose path uses an unset environment variable (an optional entry's local file)."""


@dataclass
class Loaded:
    """The tasks of one source string: `dataset` names the family's dataset ("humaneval", "gpqa_diamond",
    "aime", ...), `kind` what its tasks are: "mc" (multiple choice), "math" (final answer) or "code"."""

    dataset: str
    kind: str
    tasks: list[Task]


def is_source_string(data: Any) -> bool:
    """Whether `data` is a "KIND:..." source string of a known kind."""
    if not isinstance(data, str):
        return False
    kind, _, rest = data.partition(":")
    return kind in KINDS and bool(rest)


def expand(path: str) -> str:
    """`path` with ~ and $VARS expanded; NotConfigured when a variable is unset."""
    expanded = os.path.expanduser(os.path.expandvars(path))
    if "$" in expanded:
        raise NotConfigured(f"path {path!r} uses an unset environment variable")
    return expanded


def split_source(source: str) -> tuple[str, str]:
    """(kind, what) of a "KIND:WHAT" source string; an unknown kind is the one unknown-name line."""
    kind, _, rest = source.partition(":")
    if kind not in KINDS or not rest:
        raise ConfigError(unknown("task source", kind, KINDS, f"in {source!r}: a source is KIND:WHAT"))
    return kind, rest


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
        return FILE_DATASETS[kind]
    opts = dict(options or {})
    dataset = str(opts.get("dataset") or rest.partition(":")[0])
    return dataset if dataset in TASK_KIND else None


def load(source: str, *, style: PromptStyle = "env", options: dict[str, Any] | None = None, seed: int = 0) -> Loaded:
    """The tasks of a source string (see the module docstring), with the prompts of `style`."""
    check_style(style)
    opts = dict(options or {})
    kind, rest = split_source(source)
    if kind == "asset":
        name, split, dataset = _asset(rest, opts)
        if dataset not in TASK_KIND:
            raise ConfigError(f"asset {dataset!r} is not a benchmark dataset; use one of "
                              f"{', '.join(MC_DATASETS + MATH_DATASETS + CODE_DATASETS)} (a local file: "
                              "options.dataset names the dataset it holds)")
        from toolgym import assets

        if name.endswith(".jsonl") and os.path.isfile(name):  # the user's file: a bad record is FILE:LINE, as
            numbered = list(iter_jsonl(name, error=AssetError, objects=True))  # a bad line of it is
            rows, where = [row for _, row in numbered], [f"{name}:{n}" for n, _ in numbered]
        else:
            rows, where = list(assets.load_records(name, split=split)), None
        return Loaded(dataset, TASK_KIND[dataset], _asset_tasks(dataset, rows, style, opts, where))
    dataset = FILE_DATASETS[kind]
    path = expand(rest)
    if kind == "livecodebench":
        tasks = livecodebench.load_tasks(path, style=style, trust_pickle=bool(opts.get("trust_pickle")),
                                         since=opts.get("since"), until=opts.get("until"))
    elif kind == "codecontests":
        tasks = codecontests.load_tasks(path, style=style)
    elif kind == "kattis":
        tasks = _kattis_tasks(path, opts.get("time_limit_s"))
    elif kind == "gpqa":
        tasks = [multiple_choice.mc_task(r, n, style=style, dataset=dataset)
                 for n, r in enumerate(gpqa.load_csv(path, seed=seed))]
    else:
        tasks = math_records.load_aime(path, style=style)
    return Loaded(dataset, TASK_KIND[dataset], tasks)


def _asset_tasks(dataset: str, rows: list[dict[str, Any]], style: PromptStyle, opts: dict[str, Any],
                 where: list[str] | None = None) -> list[Task]:
    if dataset in function_sets.TASKS:
        build = function_sets.TASKS[dataset]
        return _each(dataset, rows, lambda r, i: build(r, i, style), where=where)
    if dataset in MATH_DATASETS:
        return _each(dataset, rows, lambda r, i: math_records.math_task(r, i, style=style), where=where)
    keep = multiple_choice.subject_filter(opts.get("subjects")) if dataset == "mmlu" else None
    return _each(dataset, rows, lambda r, i: multiple_choice.mc_task(r, i, style=style, dataset=dataset),
                 keep=lambda r: keep is None or r.get("subject") in keep, where=where)


def _each(name: str, rows: list[dict[str, Any]], build: Any, keep: Any = None,
          where: list[str] | None = None) -> list[Task]:
    """Every (kept) row's Task; a bad row raises TaskValidationError naming it (as `records_to_source`):
    ``where[i]`` (a JSON Lines file's FILE:LINE) when given, else ``NAME row I``."""
    out = []
    for i, row in enumerate(rows):
        if keep is not None and not keep(row):
            continue
        at = where[i] if where is not None else f"{name} row {i}"
        try:
            out.append(build(row, i))
        except TaskValidationError as exc:
            raise TaskValidationError(f"{at}: {exc}") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise TaskValidationError(f"{at}: {type(exc).__name__}: {exc}") from None
    return out


def _kattis_tasks(path: str, default_time_limit_s: Any) -> list[Task]:
    """Every well-formed package's Task (the same prompt in every style); a malformed one is skipped
    with one logged line naming its file, a folder without any is an AssetError."""
    from toolgym.envs.kattis import load_packages

    try:
        problems, errors = load_packages(path)
    except ConfigError as exc:  # no such folder, or no package in it
        raise AssetError(str(exc)) from None
    if not problems:
        raise AssetError(f"{path}: no well-formed Kattis problem package ({len(errors)} malformed: "
                         f"{errors[0] if errors else 'none found'})")
    limit = float(default_time_limit_s) if default_time_limit_s else None
    return [p.to_task(limit) for p in problems]
