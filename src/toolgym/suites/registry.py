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

import copy
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from toolgym._registry import Registry
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


#: suites by name: the built-in ``science``, ``code`` and ``math`` (toolgym.suites.builtin, imported when first
#: named) and those packages declare in the entry-point group ``toolgym.suites`` (a :class:`Suite`, registered
#: under the entry point's name, or a hook that calls ``SUITES.add``); ``package.module:SUITE`` names one too.
SUITES: Registry[Suite] = Registry("suite", "toolgym.suites", accepts=lambda obj: isinstance(obj, Suite))
BUILTIN = ("science", "code", "math")
for _name in BUILTIN:
    SUITES.add(_name, f"toolgym.suites.builtin:{_name.upper()}", lazy=True)


def builtin_suites() -> dict[str, Suite]:
    """The built-in suites (fresh copies: a caller may change its own)."""
    return {n: copy.deepcopy(SUITES[n]) for n in BUILTIN}


def registered_suites() -> dict[str, Suite]:
    """Every registered suite, built-ins first, then plug-ins (fresh copies)."""
    return {n: copy.deepcopy(SUITES[n]) for n in SUITES}


_SUITE_KEYS = ("name", "description", "entries")
_ENTRY_KEYS = ("name", "env", "source", "metric", "options", "optional")


ENV_PARTS = ("test", "train", "all")  # `source: env[:PART]`: the entry's environment's own tasks


def check_source(source: str) -> None:
    """A task source string or `env[:PART]` (suites.entries.env_tasks), refused in one line when unknown."""
    kind, _, part = source.partition(":")
    if kind == "env":
        if part and part not in ENV_PARTS:
            raise ConfigError(unknown("env source part", part, ENV_PARTS, f"in {source!r}: env[:PART]"))
        return
    split_source(source)


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
        check_source(str(e["source"]))  # a typo'd kind is refused before a run folder is made
        entries.append(SuiteEntry(str(e["name"]), str(e["env"]), str(e["source"]), str(e["metric"]),
                                  dict(e.get("options") or {}), bool(e.get("optional", False))))
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: entry names must be unique")
    return Suite(str(data.get("name") or Path(where).stem), entries, str(data.get("description") or ""))


def load_suite(name_or_path: str) -> Suite:
    """A registered suite by name (code, science, math, plug-ins), ``package.module:SUITE``, or a YAML file."""
    if name_or_path in SUITES:
        return copy.deepcopy(SUITES[name_or_path])
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
    return copy.deepcopy(SUITES.find(name_or_path, note="or a suite YAML file"))
