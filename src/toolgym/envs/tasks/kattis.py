"""Kattis / ICPC problem packages (the problem package format of problemtools and BAPCtools).

    problems, errors = load_packages("path/to/problems")      # a package folder, or a folder of them
    problems[0].tests(), problems[0].judge_options(), problems[0].prompt()
    tasks = read("path/to/problems")      # the family's reader (kattis:PATH): one Task per well-formed package

A package is a folder with `problem.yaml`; its statement in `problem_statement/` or `statement/`
(`problem.<lang>.md` or `.tex`, English preferred); tests as `.in`/`.ans` pairs under
`data/sample` and `data/secret` (sub-folders included); an optional output validator in
`output_validators/` (legacy: one sub-folder per validator) or `output_validator/` (C++ or
Python sources), run by the judge as `validator input answer feedback_dir [args] < output`
(exit 42 accepts, 43 rejects). Without one, Kattis's default validator applies, with
`validator_flags` (legacy problem.yaml) or `output_validator_args`/`output_validator_flags`
(`data/test_group.yaml` / `data/testdata.yaml`). Interactive problems (`type: interactive`,
or legacy `validation: custom interactive`) connect validator and program by pipes.
Scoring problems are judged pass/fail per test (the reward is the fraction passed);
multi-pass and submit-answer problems, and validators built by `build`/`run` scripts, are
refused with one line naming the file. A malformed package never stops the others loading.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.envs.tasks.family import TaskFamily, register_family
from toolgym.envs.types import Task
from toolgym.errors import AssetError, ConfigError

log = logging.getLogger(__name__)

CPP_SUFFIXES = (".cc", ".cpp", ".cxx", ".c++", ".C")
VALIDATOR_DIRS = ("output_validators", "output_validator")
STATEMENT_DIRS = ("statement", "problem_statement")
GROUP_FILES = ("test_group.yaml", "testdata.yaml")
UNSUPPORTED_TYPES = ("multi-pass", "submit-answer")
STDIO_HINT = ("Write a Python 3 program that reads from standard input and writes to standard output, "
              "in one ```python code block.")
INTERACTIVE_HINT = ("This problem is interactive: your program talks to a judge program through standard input "
                    "and output. Flush your output after every line (print(..., flush=True)) and read the judge's "
                    "replies as they come.")


class PackageError(ConfigError):
    """A malformed problem package; the message is one line naming the file."""


@dataclass
class KattisTest:
    """One test: its name (path under data/), input and answer (the `.ans`)."""

    name: str
    input: str
    answer: str


@dataclass
class KattisProblem:
    """A parsed problem package (everything the judge and a prompt need, held as text)."""

    path: Path
    id: str
    name: str
    statement: str
    samples: list[KattisTest]
    secret: list[KattisTest]
    type: str = "pass-fail"
    interactive: bool = False
    validator: dict[str, Any] | None = None  # OutputValidator fields (sources, language, args, ...)
    flags: list[str] = field(default_factory=list)  # default validator flags
    time_limit_s: float | None = None
    memory_mb: int | None = None
    sample_interactions: list[str] = field(default_factory=list)

    def tests(self, samples: bool = True) -> list[KattisTest]:
        """Samples (unless `samples` is false), then secret tests, as Kattis judges them."""
        return (self.samples if samples else []) + self.secret

    def judge_options(self) -> dict[str, Any]:
        """Keyword arguments of `toolgym.sandbox.judge` for this problem (JSON-serializable)."""
        opts: dict[str, Any] = ({"validator": self.validator} if self.validator is not None
                                else {"checker": "kattis", "checker_args": list(self.flags)})
        if self.time_limit_s is not None:
            opts["time_limit_s"] = self.time_limit_s
        if self.memory_mb is not None:
            opts["memory_mb"] = self.memory_mb
        return opts

    def prompt(self, hint: str = STDIO_HINT) -> str:
        """The statement, its samples (or sample interactions) and how to answer."""
        parts = [f"# {self.name}", self.statement.strip()]
        for i, t in enumerate([] if self.interactive else self.samples, 1):
            parts.append(f"Sample input {i}:\n```\n{t.input.rstrip()}\n```\nSample output {i}:\n```\n{t.answer.rstrip()}\n```")
        for i, text in enumerate(self.sample_interactions, 1):
            parts.append(f"Sample interaction {i} (lines starting with '<' are the judge's, '>' yours):\n"
                         f"```\n{text.rstrip()}\n```")
        if self.interactive:
            parts.append(INTERACTIVE_HINT)
        parts.append(hint)
        return "\n\n".join(parts)

    def to_task(self, default_time_limit_s: float | None = None) -> Task:
        """The toolgym/CodeContest-v0 task: samples are the public tests, samples + secret the hidden ones."""
        opts = self.judge_options()
        if "time_limit_s" not in opts and default_time_limit_s is not None:
            opts["time_limit_s"] = default_time_limit_s
        public = [{"input": t.input, "output": t.answer} for t in self.samples]
        hidden = public + [{"input": t.input, "output": t.answer} for t in self.secret]
        return Task(id=self.id, prompt=[{"role": "user", "content": self.prompt()}],
                    ground_truth={"mode": "stdio", "public": public, "hidden": hidden, "entry_point": None,
                                  "prefix": "", "judge": opts},
                    metadata={"source": "kattis", "mode": "stdio", "type": self.type, "interactive": self.interactive,
                              "num_public_tests": len(public), "num_hidden_tests": len(hidden)})


# ------------------------------------------------------------------------------------ parsing


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise PackageError(f"{path}: not UTF-8 text") from None
    except OSError as exc:
        raise PackageError(f"{path}: cannot be read ({exc.strerror})") from None


def _yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(_text(path))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise PackageError(f"{path}: invalid YAML{where}: {getattr(exc, 'problem', None) or exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise PackageError(f"{path}: expected a mapping of keys, got {type(data).__name__}")
    return data


def _natural(p: Path) -> list[Any]:
    return [int(s) if s.isdigit() else s for s in re.split(r"(\d+)", p.as_posix())]


def _pairs(data: Path, group: str, interactive: bool) -> tuple[list[KattisTest], list[str]]:
    folder = data / group
    if not folder.is_dir():
        return [], []
    tests = []
    for inp in sorted(folder.rglob("*.in"), key=_natural):
        ans = inp.with_suffix(".ans")
        if not ans.is_file():
            raise PackageError(f"{inp}: no matching answer file {ans.name}")
        tests.append(KattisTest(inp.relative_to(data).with_suffix("").as_posix(), _text(inp), _text(ans)))
    interactions = [_text(p) for p in sorted(folder.rglob("*.interaction"), key=_natural)] if interactive else []
    return tests, interactions


def _args(value: Any, path: Path, key: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list) and all(isinstance(a, (str, int, float)) for a in value):
        return [str(a) for a in value]
    raise PackageError(f"{path}: {key} must be a string or a list of strings")


def _group_args(data: Path) -> list[str]:
    """Validator args of data/ (test_group.yaml or testdata.yaml); a sub-group that changes them is refused."""
    def of(folder: Path) -> list[str] | None:
        for name in GROUP_FILES:
            f = folder / name
            if f.is_file():
                y = _yaml(f)
                for key in ("output_validator_args", "output_validator_flags"):
                    if key in y:
                        return _args(y[key], f, key)
        return None

    root = of(data) or []
    for f in sorted(p for n in GROUP_FILES for p in data.rglob(n) if p.parent != data):
        sub = of(f.parent)
        if sub is not None and sub != root:
            raise PackageError(f"{f}: validator arguments that differ between test groups are not supported")
    return root


def _statement(pkg: Path) -> str:
    for d in STATEMENT_DIRS:
        folder = pkg / d
        if not folder.is_dir():
            continue
        for pattern in ("problem.en.md", "problem.md", "problem.en.tex", "problem.tex", "problem.*.md", "problem.*.tex"):
            found = sorted(folder.glob(pattern))
            if found:
                return _text(found[0])
    raise PackageError(f"{pkg}: no statement (problem_statement/problem.en.tex or statement/problem.en.md)")


def _validator(pkg: Path, interactive: bool, args: list[str]) -> dict[str, Any] | None:
    folder = next((pkg / d for d in VALIDATOR_DIRS if (pkg / d).is_dir()), None)
    if folder is None:
        return None
    subdirs = [p for p in folder.iterdir() if p.is_dir()]
    if len(subdirs) == 1 and not any(p.is_file() for p in folder.iterdir()):
        folder = subdirs[0]
    files = sorted(p for p in folder.iterdir() if p.is_file())
    if any(p.name in ("build", "run") for p in files):
        raise PackageError(f"{folder}: validators built by build/run scripts are not supported (C++ or Python only)")
    cpp = [p for p in files if p.name.endswith(CPP_SUFFIXES)]
    pys = [p for p in files if p.suffix == ".py"]
    if not cpp and not pys:
        raise PackageError(f"{folder}: no C++ (.cc/.cpp) or Python (.py) output validator source "
                           f"(found: {', '.join(p.name for p in files) or 'nothing'})")
    language = "cpp" if cpp else "python"
    keep = [p for p in files if p.suffix in (".h", ".hpp", ".hh", ".py") or p.name.endswith(CPP_SUFFIXES)]
    entry = ""
    if language == "python":
        named = [p for p in pys if p.stem in ("validate", "validator", "interactor", "output_validator", "main")]
        if len(pys) > 1 and len(named) != 1:
            raise PackageError(f"{folder}: several .py files and none named validate.py: which is the validator?")
        entry = (named or pys)[0].name
    sources = {p.name: _text(p) for p in keep}
    if language == "python":
        try:
            compile(sources[entry], str(folder / entry), "exec")
        except SyntaxError as exc:
            raise PackageError(f"{folder / entry}:{exc.lineno}: the output validator does not compile: {exc.msg}") \
                from None
    return {"sources": sources, "language": language, "args": args, "interactive": interactive, "entry": entry,
            "name": str(folder.relative_to(pkg.parent))}


def _problem_type(y: dict[str, Any], path: Path) -> tuple[str, bool]:
    raw = y.get("type", "pass-fail")
    types = raw.split() if isinstance(raw, str) else raw if isinstance(raw, list) else None
    if not types or not all(isinstance(t, str) for t in types):
        raise PackageError(f"{path}: type must be a string or a list of strings")
    validation = str(y.get("validation") or "default").split()
    interactive = "interactive" in types or "interactive" in validation
    bad = [t for t in types if t in UNSUPPORTED_TYPES] + (["multi-pass"] if "multi-pass" in validation else [])
    if bad:
        raise PackageError(f"{path}: {bad[0]} problems are not supported")
    if "scoring" in types or "score" in validation:
        return "scoring", interactive
    return ("interactive" if interactive else "pass-fail"), interactive


def _name(y: dict[str, Any], pkg: Path) -> str:
    name = y.get("name")
    if isinstance(name, dict):
        name = name.get("en") or next(iter(name.values()), None)
    return str(name) if name else pkg.name


def _limits(y: dict[str, Any], path: Path) -> tuple[float | None, int | None]:
    limits = y.get("limits") or {}
    if not isinstance(limits, dict):
        raise PackageError(f"{path}: limits must be a mapping")
    tl, mem = limits.get("time_limit"), limits.get("memory")
    if tl is not None and (isinstance(tl, bool) or not isinstance(tl, (int, float)) or tl <= 0):
        raise PackageError(f"{path}: limits.time_limit must be a positive number of seconds")
    if mem is not None and (isinstance(mem, bool) or not isinstance(mem, int) or mem < 32):
        raise PackageError(f"{path}: limits.memory must be a whole number of MiB >= 32")
    return (float(tl) if tl is not None else None), mem


def load_problem(pkg: str | Path) -> KattisProblem:
    """Parse one package folder; PackageError (one line naming the file) when it is malformed."""
    pkg = Path(pkg).expanduser()
    yml = pkg / "problem.yaml"
    if not yml.is_file():
        raise PackageError(f"{yml}: missing (not a problem package)")
    y = _yaml(yml)
    ptype, interactive = _problem_type(y, yml)
    time_limit, memory = _limits(y, yml)
    data = pkg / "data"
    flags = _args(y.get("validator_flags"), yml, "validator_flags") + (_group_args(data) if data.is_dir() else [])
    samples, interactions = _pairs(data, "sample", interactive)
    secret, _ = _pairs(data, "secret", interactive)
    if not samples and not secret:
        raise PackageError(f"{data}: no tests (.in/.ans pairs under data/sample or data/secret)")
    validator = _validator(pkg, interactive, flags)
    if interactive and validator is None:
        raise PackageError(f"{pkg}: interactive problem without an output_validator(s)/ folder")
    if validator is None and "custom" in str(y.get("validation") or ""):
        raise PackageError(f"{yml}: validation is custom but there is no output_validators/ folder")
    if validator is None:
        from toolgym.sandbox.validators import ValidatorInputError, parse_flags

        try:
            parse_flags(flags)
        except ValidatorInputError as exc:
            raise PackageError(f"{yml}: {exc}") from None
    return KattisProblem(path=pkg, id=pkg.name, name=_name(y, pkg), statement=_statement(pkg), samples=samples,
                         secret=secret, type=ptype, interactive=interactive, validator=validator, flags=flags,
                         time_limit_s=time_limit, memory_mb=memory, sample_interactions=interactions)


def find_packages(root: str | Path) -> list[Path]:
    """`root` if it is a package, else its sub-folders that hold a problem.yaml, sorted."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise ConfigError(f"{root}: no such folder of Kattis problem packages")
    if (root / "problem.yaml").is_file():
        return [root]
    found = sorted(p.parent for p in root.glob("*/problem.yaml"))
    if not found:
        raise ConfigError(f"{root}: no problem packages here (no problem.yaml in it or in its sub-folders)")
    return found


def load_packages(root: str | Path) -> tuple[list[KattisProblem], list[str]]:
    """Every well-formed package under `root`, and one line per malformed one (also logged)."""
    problems, errors = [], []
    for pkg in find_packages(root):
        try:
            problems.append(load_problem(pkg))
        except PackageError as exc:
            errors.append(str(exc))
            log.warning("skipped Kattis package: %s", exc)
    return problems, errors


def is_package_source(data: Any) -> bool:
    """Whether `data` names Kattis packages: "kattis:PATH", or a folder with problem.yaml in it or one level down."""
    if not isinstance(data, (str, Path)):
        return False
    s = str(data)
    if s.startswith("kattis:"):
        return True
    p = Path(s).expanduser()
    return p.is_dir() and ((p / "problem.yaml").is_file() or any(p.glob("*/problem.yaml")))


def package_tasks(data: str | Path, default_time_limit_s: float | None = None) -> list[Task]:
    """Tasks of toolgym/CodeContest-v0 from "kattis:PATH" or a package folder; malformed packages are skipped."""
    s = str(data)
    problems, _ = load_packages(s[len("kattis:"):] if s.startswith("kattis:") else s)
    if not problems:
        raise ConfigError(f"{s}: no well-formed Kattis problem package (see the warnings above)")
    return [p.to_task(default_time_limit_s) for p in problems]


def read(path: str, *, style: str = "env", options: dict[str, Any] | None = None, seed: int = 0) -> list[Task]:
    """``kattis:PATH``: every well-formed package's Task (the same prompt in every style); a malformed one is
    skipped with one logged line naming its file, a folder without any is an AssetError. options.time_limit_s:
    for packages that state no time limit."""
    try:
        problems, errors = load_packages(path)
    except ConfigError as exc:  # no such folder, or no package in it
        raise AssetError(str(exc)) from None
    if not problems:
        raise AssetError(f"{path}: no well-formed Kattis problem package ({len(errors)} malformed: "
                         f"{errors[0] if errors else 'none found'})")
    default = (options or {}).get("time_limit_s")
    limit = float(default) if default else None
    return [p.to_task(limit) for p in problems]


register_family(TaskFamily(name="kattis", kind="code", read=read, time_limit_s=2.0,
                           description="Kattis/ICPC problem packages (kattis:PATH), each judged by its own validator"))
