"""The shipped example configs, found by name from any folder (`toolgym train arith_ctpo`).

Each YAML file lives once, in the repository's `examples/`; the package folder `toolgym/examples/` holds a
link to each, so a wheel carries copies and an editable install reads the originals. A path the user types
(and every relative path inside a config: `output_dir`, `sft.data`, task files) means the current folder.
"""

from __future__ import annotations

from pathlib import Path

from toolgym.errors import ConfigError, unknown

FOLDER = Path(__file__).resolve().parent.parent / "examples"
_SUFFIXES = (".yaml", ".yml")


def example_names() -> list[str]:
    """The shipped example configs, by the name `toolgym train NAME` takes."""
    return sorted(p.stem for p in FOLDER.glob("*.yaml")) if FOLDER.is_dir() else []


def find_config(source: str | Path) -> Path:
    """The file a config argument names: an existing file (a relative path from the current folder, as typed),
    else a shipped example by name (`arith_ctpo` or `arith_ctpo.yaml`). Otherwise one line: an unknown
    name with its close match, or a missing path saying which folder it was looked for in."""
    text = str(source)
    path = Path(text).expanduser()
    if path.is_file():
        return path
    bare = "/" not in text and "\\" not in text
    stem = text[: -len(path.suffix)] if path.suffix in _SUFFIXES else text
    names = example_names()
    if bare and stem in names:
        return FOLDER / f"{stem}.yaml"
    if path.is_dir():
        raise ConfigError(f"config {text} is a folder; give a YAML file or an example name")
    if bare and path.suffix not in _SUFFIXES:
        raise ConfigError(unknown("config", text, names, "a config may also be a path to a YAML file"))
    where = "" if path.is_absolute() else f" (a relative path starts at the current folder, {Path.cwd()})"
    shipped = f"; the shipped example of that name runs by name: {path.stem}" if path.stem in names else ""
    raise ConfigError(f"config file not found: {text}{where}{shipped}")
