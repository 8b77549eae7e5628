"""The one JSON Lines reader: task files, asset archives, suite records, completions and rollout files.

Why one: each reader used to handle blank lines, gzip and bad lines its own way; here a bad line is
one error naming `file:line` (and saying when the last line is cut short, as an interrupted writer
leaves it), raised as the caller's own error type. Standard library only (bottom layer).
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

TORN = " (the last line is incomplete: was the writer interrupted?)"


def _lines(source: str | os.PathLike | IO[str] | IO[bytes]) -> Iterator[str]:
    if isinstance(source, (str, os.PathLike)):
        p = Path(source)
        opener: Any = gzip.open if p.name.endswith(".gz") else open
        with opener(p, "rt", encoding="utf-8") as fh:
            yield from fh
        return
    for line in source:
        yield line.decode("utf-8") if isinstance(line, bytes) else line


def iter_jsonl(
    source: str | os.PathLike | IO[str] | IO[bytes] | Iterable[str],
    *,
    name: str | os.PathLike | None = None,
    error: type[Exception] = ValueError,
    skip_invalid: bool = False,
    objects: bool = False,
) -> Iterator[tuple[int, Any]]:
    """(line number, value) for each non-blank line of a path (`.gz` read as gzip) or an open file.

    A line that is not JSON raises `error("{name}:{line}: not valid JSON (...)")`, or is passed over
    with `skip_invalid` (a log appended to by a process that may have crashed mid-line); with
    `objects` a value that is not a JSON object raises too."""
    label = name if name is not None else (source if isinstance(source, (str, os.PathLike)) else "<stream>")
    for lineno, line in enumerate(_lines(source), 1):  # type: ignore[arg-type]
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            if skip_invalid:
                continue
            cut = "" if line.endswith("\n") else TORN
            raise error(f"{label}:{lineno}: not valid JSON ({why(exc, line)}){cut}") from None
        if objects and not isinstance(value, dict):
            raise error(f"{label}:{lineno}: expected a JSON object, got {type(value).__name__}")
        yield lineno, value


def why(exc: ValueError, line: str) -> str:
    """What is wrong with one line, placed by column in that line: json's own "line 2 column 1 (char 23)"
    counts within the parsed string (its trailing newline makes a line 2), a second line number that
    contradicts the file's."""
    if not isinstance(exc, json.JSONDecodeError):
        return str(exc)
    end = len(line.rstrip("\r\n"))
    return f"{exc.msg} at {'column ' + str(exc.pos + 1) if exc.pos < end else 'the end of the line'}"


def read_jsonl(source: str | os.PathLike | IO[str] | IO[bytes], **options: Any) -> list[Any]:
    """All values of a JSON Lines file (options as for `iter_jsonl`)."""
    return [value for _, value in iter_jsonl(source, **options)]
