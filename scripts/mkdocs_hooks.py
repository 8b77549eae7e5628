"""MkDocs hook: writes the training config reference from the config dataclasses at build time.

Why generated: the reference is then the schema itself (field names, types, defaults, the comments beside
each field in ``toolgym.training.config``), so it cannot drift from what ``load_config`` accepts. A page that
holds the line ``<!-- config-reference -->`` gets the tables in its place. Also runnable on its own:
``python scripts/mkdocs_hooks.py`` prints the generated Markdown.
"""

from __future__ import annotations

import dataclasses
import inspect
import io
import json
import re
import sys
import tokenize
import types
import typing
from pathlib import Path
from typing import Any

MARKER = "<!-- config-reference -->"
SRC = Path(__file__).resolve().parents[1] / "src"


def _field_docs(cls: type) -> dict[str, str]:
    """Each field's comment: the comment lines right above it plus the comment at the end of its line."""
    lines = inspect.getsource(cls).splitlines()
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0] - 1] = tok.string.lstrip("#").strip()
    names = {f.name for f in dataclasses.fields(cls)}
    docs: dict[str, str] = {}
    for i, line in enumerate(lines):
        m = re.match(r"^    (\w+)\s*:", line)
        if not m or m.group(1) not in names or m.group(1) in docs:
            continue
        above: list[str] = []
        j = i - 1
        while j >= 0 and lines[j].strip().startswith("#"):
            above.insert(0, comments.get(j, ""))
            j -= 1
        trailing = comments.get(i) if not line.strip().startswith("#") else None
        docs[m.group(1)] = " ".join([*above, *([trailing] if trailing else [])]).strip()
    return docs


def _type_text(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " | ".join("null" if a is type(None) else _type_text(a) for a in typing.get_args(tp))
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


def render() -> str:
    """The whole reference: the top level, every section, then each algorithm's ``options:``."""
    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    from toolgym.training.algorithms import ALGORITHMS
    from toolgym.training.config import TrainConfig

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
