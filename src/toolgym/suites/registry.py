"""Suites: named lists of (environment, task source, metric) entries; built-ins and YAML files.

YAML format:

    name: my-suite
    entries:
      - name: arc_challenge
        env: toolgym/ScienceQA-v0
        source: asset:arc_challenge
        metric: acc_norm          # headline metric: acc, acc_norm, pass@K, avg@K, maj@K
      - name: lcb
        env: toolgym/CodeContest-v0
        source: livecodebench:~/data/lcb
        metric: pass@1
        options: {since: "2024-08-01"}
        optional: true            # skipped (and reported) when its file or variable is missing
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from toolgym.envs.tasks.catalog import split_source
from toolgym.errors import ConfigError, unknown

METRIC_RE = re.compile(r"^(acc|acc_norm|(pass|avg|maj)@\d+)$")


@dataclass
class SuiteEntry:
    """One benchmark inside a suite."""

    name: str
    env: str
    source: str
    metric: str
    options: dict[str, Any] = field(default_factory=dict)
    optional: bool = False

    def __post_init__(self) -> None:
        if not METRIC_RE.match(self.metric):
            raise ConfigError(f"entry {self.name!r}: metric {self.metric!r} is not one of acc, acc_norm, "
                              "pass@K, avg@K, maj@K")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Suite:
    name: str
    entries: list[SuiteEntry]
    description: str = ""

    def select(self, subset: str | None) -> Suite:
        """Only the entries named in `subset` (comma-separated)."""
        if not subset:
            return self
        wanted = [s.strip() for s in subset.split(",") if s.strip()]
        names = {e.name for e in self.entries}
        missing = [w for w in wanted if w not in names]
        if missing:
            raise ConfigError(unknown("suite entry", missing[0], sorted(names), f"in suite {self.name!r}"))
        return Suite(self.name, [e for e in self.entries if e.name in wanted], self.description)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "entries": [e.to_dict() for e in self.entries]}


SCIENCE_ENV = "toolgym/ScienceQA-v0"
CODE_ENV = "toolgym/CodeContest-v0"
MATH_ENV = "toolgym/MathTIR-v0"


def _builtin() -> dict[str, Suite]:
    from toolgym.envs.tasks.multiple_choice import MMLU_STEM

    science = Suite("science", [
        SuiteEntry("arc_challenge", SCIENCE_ENV, "asset:arc_challenge", "acc_norm"),
        SuiteEntry("arc_easy", SCIENCE_ENV, "asset:arc_easy", "acc_norm"),
        SuiteEntry("mmlu_stem", SCIENCE_ENV, "asset:mmlu", "acc", options={"subjects": list(MMLU_STEM)}),
        SuiteEntry("sciq", SCIENCE_ENV, "asset:sciq", "acc_norm"),
        SuiteEntry("openbookqa", SCIENCE_ENV, "asset:openbookqa", "acc_norm"),
        SuiteEntry("gpqa_diamond", SCIENCE_ENV, "gpqa:$TOOLGYM_GPQA_CSV", "acc", optional=True),
    ], "Science QA: ARC, MMLU STEM, SciQ, OpenBookQA; GPQA-Diamond when $TOOLGYM_GPQA_CSV is set.")
    code = Suite("code", [
        SuiteEntry("humaneval", CODE_ENV, "asset:humaneval", "pass@1"),
        SuiteEntry("mbpp", CODE_ENV, "asset:mbpp", "pass@1"),
        SuiteEntry("leetcode", CODE_ENV, "asset:leetcode", "pass@1", optional=True),
        SuiteEntry("livecodebench", CODE_ENV, "livecodebench:$TOOLGYM_LCB_DIR", "pass@1", optional=True),
        SuiteEntry("codecontests", CODE_ENV, "codecontests:$TOOLGYM_CODECONTESTS", "pass@1", optional=True),
        SuiteEntry("kattis", CODE_ENV, "kattis:$TOOLGYM_KATTIS_DIR", "pass@1", optional=True),
    ], "Code: HumanEval, MBPP, LeetCode; LiveCodeBench / CodeContests / Kattis packages from local files when "
       "configured.")
    math = Suite("math", [
        SuiteEntry("gsm8k", MATH_ENV, "asset:gsm8k", "pass@1"),
        SuiteEntry("math500", MATH_ENV, "asset:math500", "pass@1"),
        SuiteEntry("aime", MATH_ENV, "aime:$TOOLGYM_AIME_JSONL", "avg@1", optional=True),
    ], "Math: GSM8K, MATH-500; AIME when $TOOLGYM_AIME_JSONL is set.")
    return {s.name: s for s in (science, code, math)}


def builtin_suites() -> dict[str, Suite]:
    return _builtin()


_SUITE_KEYS = ("name", "description", "entries")
_ENTRY_KEYS = ("name", "env", "source", "metric", "options", "optional")


def suite_from_dict(data: dict[str, Any], where: str = "suite") -> Suite:
    for key in data if isinstance(data, dict) else ():  # a typo'd key is named as such, not as what it lacks
        if key not in _SUITE_KEYS:
            raise ConfigError(unknown("suite key", key, _SUITE_KEYS, f"in {where}"))
    if not isinstance(data, dict) or not isinstance(data.get("entries"), list) or not data["entries"]:
        raise ConfigError(f"{where}: needs a non-empty 'entries' list")
    entries = []
    for i, e in enumerate(data["entries"]):
        for key in e if isinstance(e, dict) else ():
            if key not in _ENTRY_KEYS:
                raise ConfigError(unknown("suite entry key", key, _ENTRY_KEYS, f"in {where}, entry {i + 1}"))
        missing = [k for k in ("name", "env", "source", "metric") if not (isinstance(e, dict) and e.get(k))]
        if missing:
            raise ConfigError(f"{where}: entry {i + 1} is missing {', '.join(missing)}")
        split_source(str(e["source"]))  # a typo'd kind is refused before a run folder is made
        entries.append(SuiteEntry(str(e["name"]), str(e["env"]), str(e["source"]), str(e["metric"]),
                                  dict(e.get("options") or {}), bool(e.get("optional", False))))
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: entry names must be unique")
    return Suite(str(data.get("name") or Path(where).stem), entries, str(data.get("description") or ""))


def load_suite(name_or_path: str) -> Suite:
    """A built-in suite by name (code, science, math) or a YAML suite file."""
    suites = _builtin()
    if name_or_path in suites:
        return suites[name_or_path]
    p = Path(name_or_path).expanduser()
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise ConfigError(f"suite file {p} not found")
        import yaml

        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise ConfigError(f"{p}: invalid YAML ({exc.__class__.__name__})") from None
        return suite_from_dict(data, str(p))
    raise ConfigError(unknown("suite", name_or_path, suites, "or a suite YAML file"))
