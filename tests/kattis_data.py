"""Where the Kattis example packages live for tests: the problemtools (MIT) and BAPCtools (GPL-3.0, used in
tests only, never copied into the repository) sdists that scripts/setup.sh downloads into the cache."""

from __future__ import annotations

from pathlib import Path

from tests.requirements import need
from toolgym._assets.cache import cache_root

PROBLEMTOOLS = "problemtools-1.20260907"
BAPCTOOLS = "bapctools-2026.10.0"


def cached_testdata(name: str) -> Path:
    """A cached sdist folder; missing -> skip locally, fail under CI (setup.sh fetches it)."""
    p = cache_root() / "testdata" / name
    need(p.is_dir(), f"{p} is missing: run scripts/setup.sh (it downloads the {name} sdist from PyPI)")
    return p
