"""MkDocs hook: writes the training config reference from the config dataclasses at build time.

Why generated: the reference is then the schema itself (field names, types, defaults, and each field's help:
``metadata["help"]`` on the field, written with ``described(default, help)`` in
``toolgym.training.config_schema`` or in an algorithm's options class), so it cannot drift from what
``load_config`` accepts. A field without help text
fails the build (:class:`UndescribedFieldsError` names each one). A page that
holds the line ``<!-- config-reference -->`` gets the tables in its place. Also runnable on its own:
``python scripts/mkdocs_hooks.py`` prints the generated Markdown.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

MARKER = "<!-- config-reference -->"
SRC = Path(__file__).resolve().parents[1] / "src"


class UndescribedFieldsError(RuntimeError):
    """Config fields without help text: the build stops and names each one."""


def _field_docs(cls: type) -> dict[str, str]:
    """Each field's help: ``metadata["help"]`` on the field itself (``config_schema.described``), folded to one
    line. Searched through the class's bases too, so a subclass that only changes a default (``SDPOOptions``)
    keeps its base's text."""
    docs: dict[str, str] = {}
    for f in dataclasses.fields(cls):
        for klass in cls.__mro__:
            own = getattr(klass, "__dataclass_fields__", {}).get(f.name)
            if own is not None and own.metadata.get("help"):
                docs[f.name] = " ".join(str(own.metadata["help"]).split())
                break
    return docs


def undescribed(cls: type, prefix: str = "") -> list[str]:
    """Dotted names of ``cls``'s fields (nested sections included) that have no help text."""
    docs = _field_docs(cls)
    hints = typing.get_type_hints(cls)
    missing: list[str] = []
    for f in dataclasses.fields(cls):
        if not docs.get(f.name):
            missing.append(prefix + f.name)
        sub = _section_class(hints[f.name])
        if sub is not None:
            missing += undescribed(sub, f"{prefix}{f.name}.")
    return missing


def _type_text(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return " or ".join(json.dumps(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " or ".join("null" if a is type(None) else _type_text(a) for a in typing.get_args(tp))
    if origin is not None:
        args = ", ".join(_type_text(a) for a in typing.get_args(tp))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if tp is type(None):
        return "null"
    if tp is typing.Any:
        return "any"
    if dataclasses.is_dataclass(tp):
        return "section"
    return getattr(tp, "__name__", str(tp))


def _default_text(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    if dataclasses.is_dataclass(value):
        return "(section)"
    if isinstance(value, tuple):
        value = list(value)
    return json.dumps(value)


def _section_class(tp: Any) -> type | None:
    """The dataclass a field holds (also through ``X | None``), else None."""
    if dataclasses.is_dataclass(tp):
        return tp
    for a in typing.get_args(tp):
        if dataclasses.is_dataclass(a):
            return a
    return None


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(cls: type, prefix: str, out: list[str], sections: list[tuple[str, type]]) -> None:
    hints = typing.get_type_hints(cls)
    docs = _field_docs(cls)
    out += ["| field | type | default | what it does |", "| --- | --- | --- | --- |"]
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        sub = _section_class(tp)
        if sub is not None:
            sections.append((f"{prefix}{f.name}", sub))
            kind = f"section: [`{prefix}{f.name}`](#{(prefix + f.name).replace('.', '')})"
            if type(None) in typing.get_args(tp):
                kind += " or null"
            out.append(f"| `{f.name}` | {kind} | {_cell(_default_text(f))} | {_cell(docs.get(f.name, ''))} |")
            continue
        out.append(f"| `{f.name}` | `{_cell(_type_text(tp))}` | `{_cell(_default_text(f))}` | "
                   f"{_cell(docs.get(f.name, ''))} |")


def check_described(config: type, options: list[tuple[str, type]]) -> None:
    """Raise :class:`UndescribedFieldsError` naming every field of ``config`` and of each algorithm's options
    dataclass that has no help text: an undescribed field fails the docs build."""
    missing = undescribed(config)
    for label, cls in options:
        missing += [f"{label}.{name}" for name in undescribed(cls)]
    if missing:
        raise UndescribedFieldsError(
            f"{len(missing)} config field(s) without help text: {', '.join(missing)}; give each one its help: "
            "described(default, help) or field(metadata={'help': ...}) (src/toolgym/training/config_schema.py, "
            "or the algorithm's options class)")


def render() -> str:
    """The whole reference: the top level, every section, then each algorithm's ``options:``."""
    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    from toolgym.training.algorithms import ALGORITHMS
    from toolgym.training.config import TrainConfig

    check_described(TrainConfig, [(f"options ({name})", a.options) for name, a in ALGORITHMS.items() if a.options])
    out: list[str] = ["## Top level", "", inspect.getdoc(TrainConfig) or "", ""]
    sections: list[tuple[str, type]] = []
    _table(TrainConfig, "", out, sections)
    while sections:
        name, cls = sections.pop(0)
        doc = inspect.getdoc(cls) if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "(") else ""
        out += ["", f"## `{name}`", "", f"`{cls.__module__}.{cls.__qualname__}`" + (f": {doc}" if doc else ""), ""]
        _table(cls, name + ".", out, sections)
    out += ["", "## `options` (per algorithm)", "",
            "The `options:` section is the dataclass the algorithm registered (`register_algorithm(..., options=...)`); "
            "an algorithm without one takes no `options:`. Defaults the algorithm sets for the `loss:` section and "
            "top-level keys are listed with it.", ""]
    for name, algo in ALGORITHMS.items():
        out += [f"### `algorithm: {name}`", ""]
        if algo.description:
            out += [algo.description, ""]
        if algo.defaults:
            out += [f"Defaults: `{_cell(json.dumps(algo.defaults))}`", ""]
        if algo.options is None:
            out += ["No `options:` section.", ""]
        else:
            out += [f"`options:` is `{algo.options.__module__}.{algo.options.__qualname__}`:", ""]
            _table(algo.options, "options.", out, [])
            out.append("")
    return "\n".join(out) + "\n"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs event: put the generated reference where the marker stands."""
    if MARKER in markdown:
        markdown = markdown.replace(MARKER, render())
    return markdown


if __name__ == "__main__":
    print(render())
