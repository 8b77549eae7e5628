"""AIME-format JSONL: one problem per line with an id ("id"/"ID"/"problem_id"), the statement
("problem"/"Problem"/"question") and an integer answer ("answer"/"Answer"); "year" optional."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolgym.errors import ConfigError
from toolgym.suites.loaders._files import data_files, iter_records


def _get(row: dict[str, Any], *names: str) -> Any:
    lower = {k.lower(): v for k, v in row.items()}
    for n in names:
        if n in lower and lower[n] not in (None, ""):
            return lower[n]
    return None


def load_aime_records(path: str | Path) -> list[dict[str, Any]]:
    """Math records {"id","question","answer","year"?} from AIME-format files."""
    out = []
    for f in data_files(path):
        for n, row in enumerate(iter_records(f)):
            q = _get(row, "problem", "question")
            a = _get(row, "answer")
            if q is None or a is None:
                raise ConfigError(f"{f} record {n}: needs 'problem' (or 'question') and 'answer' fields")
            ans = str(a).strip()
            if ans.lstrip("0").isdigit():
                ans = str(int(ans))  # AIME answers are integers 0..999, often written "033"
            rid = _get(row, "id", "problem_id", "url") or f"{f.stem}-{n}"
            out.append({"id": str(rid), "question": str(q), "answer": ans, "year": _get(row, "year")})
    return out
