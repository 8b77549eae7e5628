"""Kattis-format output validation for the judge's stdio mode (host side: arguments and spec).

    from toolgym.sandbox import judge, TestCase
    from toolgym.sandbox.validators import OutputValidator
    judge(sb, prog, tests, checker="kattis", checker_args=["float_tolerance", "1e-6"])  # default validator
    judge(sb, prog, tests, validator=OutputValidator({"validate.cc": src, "validate.h": hdr}, "cpp"))
    judge(sb, prog, tests, validator=OutputValidator({"interactor.py": src}, "python", interactive=True))

A custom validator is trusted code of the problem's author. It runs in the sandbox as uid 65533
(never the submission's uid) as ``validator input answer feedback_dir [args] < team_output``;
exit 42 accepts, 43 rejects, anything else is a judge error (verdict JE). Interactive: its
stdout is the submission's stdin and the submission's stdout its stdin. See injected/kattis_validation.py.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from toolgym.errors import ToolgymError
from toolgym.sandbox.types import from_fields

LANGUAGES = ("cpp", "python")
CPP_SUFFIXES = (".cc", ".cpp", ".cxx", ".c++", ".C")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*\Z")
_BOOL_FLAGS = ("case_sensitive", "space_change_sensitive")
_TOL_FLAGS = {"float_tolerance": ("abs_tol", "rel_tol"), "float_absolute_tolerance": ("abs_tol",),
              "float_relative_tolerance": ("rel_tol",)}


class ValidatorInputError(ToolgymError, ValueError):
    """Bad validator arguments (raised as the judge's JudgeInputError by `judge`)."""


@dataclass(frozen=True)
class OutputValidator:
    """A Kattis output validator: its source files (name -> text), language, extra arguments."""

    sources: dict[str, str]
    language: str = "cpp"
    args: tuple[str, ...] | list[str] = ()
    interactive: bool = False
    entry: str = ""  # python: the file to run (default: the only .py file)
    name: str = ""  # where it came from, for messages

    def spec(self) -> dict[str, Any]:
        """The harness's view of the validator; ValidatorInputError on anything malformed."""
        where = self.name or "validator"
        if self.language not in LANGUAGES:
            raise ValidatorInputError(f"{where}: validator language must be one of {', '.join(LANGUAGES)}, "
                                      f"got {self.language!r}")
        if not isinstance(self.sources, dict) or not self.sources:
            raise ValidatorInputError(f"{where}: validator sources must be a non-empty dict of file name -> text")
        for n, text in self.sources.items():
            if not isinstance(n, str) or not _NAME.match(n) or n == "validator":
                raise ValidatorInputError(f"{where}: bad validator file name {n!r} (a plain file name, not 'validator')")
            if not isinstance(text, str):
                raise ValidatorInputError(f"{where}: validator file {n} must be text")
        if isinstance(self.args, str) or not all(isinstance(a, str) for a in self.args):
            raise ValidatorInputError(f"{where}: validator args must be a list of str")
        entry = self.entry
        if self.language == "python":
            pys = [n for n in self.sources if n.endswith(".py")]
            entry = entry or (pys[0] if len(pys) == 1 else "")
            if entry not in self.sources:
                raise ValidatorInputError(f"{where}: say which Python file is the validator (entry=); files: "
                                          f"{', '.join(sorted(self.sources))}")
        elif not any(n.endswith(CPP_SUFFIXES) for n in self.sources):
            raise ValidatorInputError(f"{where}: a C++ validator needs a .cc/.cpp source file")
        return {"sources": dict(self.sources), "language": self.language, "args": list(self.args),
                "interactive": bool(self.interactive), "entry": entry, "name": self.name or "output validator"}


def as_validator(v: Any) -> OutputValidator:
    """An OutputValidator from itself or a dict of its fields."""
    return from_fields(OutputValidator, v, "validator", ValidatorInputError)


def parse_flags(args: Any) -> dict[str, Any]:
    """Kattis default-validator flags (a list, or one whitespace-separated str) -> the harness's dict."""
    if args is None:
        args = []
    if isinstance(args, str):
        args = args.split()
    if not isinstance(args, (list, tuple)) or not all(isinstance(a, str) for a in args):
        raise ValidatorInputError(f"checker_args must be a list of str, got {args!r}")
    out: dict[str, Any] = {"case_sensitive": False, "space_change_sensitive": False, "abs_tol": None, "rel_tol": None}
    i = 0
    while i < len(args):
        a = args[i]
        if a in _BOOL_FLAGS:
            out[a] = True
        elif a in _TOL_FLAGS:
            try:
                tol = float(args[i + 1])
            except (IndexError, ValueError):
                raise ValidatorInputError(f"default validator flag {a} needs a number after it") from None
            if not math.isfinite(tol) or tol < 0:
                raise ValidatorInputError(f"default validator flag {a}: tolerance must be finite and >= 0")
            for key in _TOL_FLAGS[a]:
                out[key] = tol
            i += 1
        else:
            raise ValidatorInputError(f"unknown default validator flag {a!r}; use case_sensitive, "
                                      "space_change_sensitive, float_tolerance E, float_absolute_tolerance E, "
                                      "float_relative_tolerance E")
        i += 1
    return out
