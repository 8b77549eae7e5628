"""The AIME family (`aime:PATH`): ids, integer answers written with leading zeros, the year, each style's prompt,
and a record without an answer named in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolgym.envs.tasks.catalog import load
from toolgym.errors import ConfigError


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_aime_jsonl(tmp_path: Path) -> None:
    f = _write_jsonl(tmp_path / "aime.jsonl", [
        {"ID": "2024-I-1", "Problem": "Find x.", "Answer": "033", "Year": 2024},
        {"id": 7, "problem": "Find y.", "answer": 204},
    ])
    loaded = load(f"aime:{f}", style="generate")
    assert (loaded.dataset, loaded.kind) == ("aime", "math")
    assert [(t.id, t.ground_truth) for t in loaded.tasks] == [("2024-I-1", "33"), ("7", "204")]
    assert loaded.tasks[0].metadata["year"] == 2024
    assert load(f"aime:{f}", style="env").tasks[0].prompt == [{"role": "user", "content": "Find x."}]
    assert loaded.tasks[0].prompt[0]["content"].startswith("Find x.\n\nPlease reason step by step")
    _write_jsonl(tmp_path / "broken.jsonl", [{"id": 1, "problem": "no answer"}])
    with pytest.raises(ConfigError, match="answer"):
        load(f"aime:{tmp_path / 'broken.jsonl'}")
