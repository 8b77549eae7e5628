"""Task sources: a source string names where an entry's tasks come from.

  asset:NAME[:SPLIT]         a dataset in the toolgym asset cache (gsm8k, math500, humaneval, mbpp,
                             leetcode, arc_challenge, arc_easy, mmlu, sciq, openbookqa); NAME may be a
                             local .jsonl file or folder in the asset schema, with options.dataset
                             naming the dataset it holds
  livecodebench:PATH         a LiveCodeBench code_generation_lite folder or file
  codecontests:PATH          CodeContests-format JSONL/JSON/Parquet
  gpqa:PATH                  the official GPQA CSV (gpqa_diamond.csv)
  aime:PATH                  AIME-format JSONL
  kattis:PATH                Kattis/ICPC problem packages: one package folder or a folder of them
                             (options.time_limit_s: for packages that state no time limit)
PATH may use ~ and $VARS; an unset variable leaves the entry "not configured" (skipped, reported).
"""

from __future__ import annotations

import os
from typing import Any

from toolgym.errors import AssetError, ConfigError
from toolgym.suites.eval_task import EvalTask

MC_DATASETS = ("arc_challenge", "arc_easy", "mmlu", "sciq", "openbookqa")
MATH_DATASETS = ("gsm8k", "math", "math500")
CODE_DATASETS = ("humaneval", "mbpp", "leetcode")
KINDS = ("asset", "livecodebench", "codecontests", "gpqa", "aime", "kattis")


class NotConfigured(AssetError):
    """An optional entry whose local path is not set."""


def load_asset_records(name: str, split: str | None = None) -> list[dict[str, Any]]:
    """Records of an asset (its default split, "test" where it has one, unless `split` is given)."""
    from toolgym import assets

    return list(assets.load_records(name, split=split))


def _expand(path: str) -> str:
    expanded = os.path.expanduser(os.path.expandvars(path))
    if "$" in expanded:
        raise NotConfigured(f"path {path!r} uses an unset environment variable")
    return expanded


def load_source(source: str, *, options: dict[str, Any] | None = None, seed: int = 0) -> list[EvalTask]:
    """EvalTasks of one source string (see the module docstring)."""
    opts = dict(options or {})
    kind, _, rest = source.partition(":")
    if kind not in KINDS or not rest:
        raise ConfigError(f"unknown task source {source!r}; use one of {', '.join(k + ':...' for k in KINDS)}")
    if kind == "asset":
        if rest.startswith(("/", ".", "~", "$")):  # a local file or folder; split from options
            name, split = _expand(rest), str(opts.get("split") or "")
        else:
            name, _, split = rest.partition(":")
        records = load_asset_records(name, split or None)
        name = str(opts.get("dataset") or name)  # a local records file says which dataset format it holds
        if name in MC_DATASETS:
            from toolgym.suites.science import mc_tasks

            return mc_tasks(name, records, subjects=opts.get("subjects"))
        if name in MATH_DATASETS:
            from toolgym.suites.math import math_tasks

            return math_tasks(name, records)
        if name in CODE_DATASETS:
            from toolgym.suites.code import code_tasks

            return code_tasks(name, records)
        raise ConfigError(f"asset {name!r} is not a benchmark dataset; use one of "
                          f"{', '.join(MC_DATASETS + MATH_DATASETS + CODE_DATASETS)}")
    path = _expand(rest)
    if kind == "livecodebench":
        from toolgym.suites.loaders.livecodebench import load_livecodebench

        return load_livecodebench(path, trust_pickle=bool(opts.get("trust_pickle")), since=opts.get("since"),
                                  until=opts.get("until"))
    if kind == "codecontests":
        from toolgym.suites.loaders.codecontests import load_codecontests

        return load_codecontests(path)
    if kind == "kattis":
        from toolgym.suites.loaders.kattis import DEFAULT_TIME_LIMIT_S, load_kattis

        return load_kattis(path, float(opts.get("time_limit_s") or DEFAULT_TIME_LIMIT_S))
    if kind == "gpqa":
        from toolgym.suites.loaders.gpqa import load_gpqa_records
        from toolgym.suites.science import mc_tasks

        return mc_tasks("gpqa_diamond", load_gpqa_records(path, seed=seed))
    from toolgym.suites.loaders.aime import load_aime_records
    from toolgym.suites.math import math_tasks

    return math_tasks("aime", load_aime_records(path))
