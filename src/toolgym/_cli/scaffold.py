"""`toolgym envs new NAME`: write a new environment package that checks, tests and trains as generated.

The id rule: NAME (lowercase words joined by "-") is the package folder, the distribution name and the id's
namespace; the import package is NAME with "_" for "-"; the class is NAME in CamelCase with "Env" added unless
it already ends so; the id is `NAME/<CamelCase>-v0` (`my-env` -> `my-env/MyEnv-v0`, class `MyEnv`;
`counter` -> `counter/Counter-v0`, class `CounterEnv`).
"""

from __future__ import annotations

import keyword
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from string import Template

from toolgym._cli.scaffold_templates import TEMPLATES

_NAME = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
MAX_NAME = 40


@dataclass(frozen=True)
class Names:
    """Every name the package's files use, derived from NAME by the rule in the module docstring."""

    name: str
    module: str
    camel: str
    cls: str
    env_id: str


def names_for(name: str) -> Names:
    """The names of a valid NAME (see `name_error`)."""
    camel = "".join(part.capitalize() for part in name.split("-"))
    cls = camel if camel.endswith("Env") else f"{camel}Env"
    return Names(name=name, module=name.replace("-", "_"), camel=camel, cls=cls, env_id=f"{name}/{camel}-v0")


def name_error(name: str) -> str | None:
    """Why NAME cannot name a package (one line), or None when it can."""
    if not _NAME.fullmatch(name) or len(name) > MAX_NAME:
        return (f"NAME {name!r} must be lowercase letters and digits in words joined by '-', starting with a letter, "
                f"at most {MAX_NAME} characters (e.g. my-env)")
    module = name.replace("-", "_")
    if keyword.iskeyword(module):
        return f"NAME {name!r} is a Python keyword and cannot name an import package; pick another"
    if module in sys.stdlib_module_names or module == "toolgym":
        return f"NAME {name!r} would make an import package {module!r} that hides Python's or toolgym's own; pick another"
    return None


def render(names: Names) -> dict[str, str]:
    """The package's files, relative path -> text."""
    fields = asdict(names)  # templates name them as ${module}, ${env_id}, ...
    return {Template(path).substitute(fields): Template(text).substitute(fields) for path, text in TEMPLATES.items()}


def write_package(parent: Path, name: str) -> tuple[Path, Names]:
    """Write the package for NAME into `parent/NAME`; refuses (FileExistsError) when that path exists."""
    names = names_for(name)
    root = parent / name
    files = render(names)
    root.mkdir(parents=True, exist_ok=False)  # the one place that refuses: nothing of the user's is touched
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root, names
