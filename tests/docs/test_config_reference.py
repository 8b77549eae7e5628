"""The config reference is complete: every field of every section (and of each algorithm's ``options:``) has
help text, read from the field itself (``metadata["help"]``), and the docs hook refuses to build a reference
with a gap."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from toolgym.training.config_schema import described

ROOT = Path(__file__).resolve().parents[2]


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("toolgym_mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclasses.dataclass
class _Inner:
    size: int = described(1, "How big.")
    colour: str = "red"
    """An attribute docstring is not help text: the help is on the field."""


@dataclasses.dataclass
class _Outer:
    inner: _Inner = dataclasses.field(default_factory=_Inner, metadata={"help": "A nested section."})
    steps: int = 3  # a trailing comment is not help text


@dataclasses.dataclass
class _Options:
    k: int = described(1, """
        Top-k,
        over several lines.""")


@dataclasses.dataclass
class _ChangedDefault(_Options):
    k: int = 5


def test_every_shipped_config_field_has_help_text() -> None:
    from toolgym.training.algorithms import ALGORITHMS
    from toolgym.training.config import TrainConfig

    hook = _hook()
    assert hook.undescribed(TrainConfig) == []
    for name, algo in ALGORITHMS.items():
        if algo.options is not None:
            assert hook.undescribed(algo.options) == [], name


def test_an_undescribed_field_fails_the_reference_naming_each_one() -> None:
    hook = _hook()
    assert hook.undescribed(_Outer) == ["inner.colour", "steps"]
    with pytest.raises(hook.UndescribedFieldsError, match=r"2 config field\(s\) without help text: inner.colour, "
                                                          r"steps; give each one its help"):
        hook.check_described(_Outer, [])
    hook.check_described(_Options, [("options (x)", _ChangedDefault)])  # a subclass keeps its base's text
    assert hook._field_docs(_ChangedDefault) == {"k": "Top-k, over several lines."}
    assert hook._field_docs(_Outer) == {"inner": "A nested section."}


def test_generated_reference_has_a_description_in_every_row_and_no_escaped_pipe_in_code() -> None:
    text = _hook().render()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) > 150
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert len(cells) == 4 and len(cells[3]) > 10, row
        assert not re.search(r"`[^`]*\\\|[^`]*`", row), f"an escaped pipe inside a code span shows a backslash: {row}"
    assert "| `seed` | `int` | `0` | Seeds torch" in text
    assert "| `tokenizer` | `str or null` | `null` |" in text
