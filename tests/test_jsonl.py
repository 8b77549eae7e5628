"""The one JSON Lines reader: blank lines, gzip, open streams, and a bad line named file:line."""

from __future__ import annotations

import gzip
import io

import pytest

from toolgym._jsonl import iter_jsonl, read_jsonl
from toolgym.errors import ConfigError


def test_reads_values_with_their_line_numbers(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text('{"a": 1}\n\n  \n[2]\n"three"\n', encoding="utf-8")
    assert list(iter_jsonl(p)) == [(1, {"a": 1}), (4, [2]), (5, "three")]


def test_gzip_paths_and_open_streams(tmp_path):
    p = tmp_path / "b.jsonl.gz"
    with gzip.open(p, "wt", encoding="utf-8") as fh:
        fh.write('{"x": "é"}\n{"x": 2}\n')
    assert read_jsonl(p) == [{"x": "é"}, {"x": 2}]
    assert read_jsonl(io.BytesIO(b'{"y": 1}\n')) == [{"y": 1}]
    assert read_jsonl(io.StringIO('{"z": 1}\n'), name="mem") == [{"z": 1}]


def test_a_bad_line_names_file_and_line_in_the_callers_error(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"ok": 1}\n{broken\n{"ok": 2}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.jsonl:2: not valid JSON") as info:
        read_jsonl(p, error=ConfigError)
    assert "incomplete" not in str(info.value)
    assert read_jsonl(p, skip_invalid=True) == [{"ok": 1}, {"ok": 2}]


def test_a_torn_last_line_is_said_so(tmp_path):
    p = tmp_path / "torn.jsonl"
    p.write_text('{"ok": 1}\n{"cut": ', encoding="utf-8")
    with pytest.raises(ValueError, match=r"torn\.jsonl:2: .*last line is incomplete"):
        read_jsonl(p)


def test_objects_only(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text('{"a": 1}\n[1, 2]\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"c\.jsonl:2: expected a JSON object, got list"):
        read_jsonl(p, objects=True)


def test_a_bad_line_has_one_line_number_the_files(tmp_path):
    """json's own "line 2 column 1 (char 11)" counts inside the one parsed line; only the file's number is said."""
    p = tmp_path / "d.jsonl"
    p.write_text('{"ok": 1}\n\n{"cut": \n{"a": x}\n', encoding="utf-8")
    with pytest.raises(ValueError) as info:
        read_jsonl(p)
    assert str(info.value) == f"{p}:3: not valid JSON (Expecting value at the end of the line)"
    p.write_text('{"ok": 1}\n{"a": x}\n', encoding="utf-8")
    with pytest.raises(ValueError) as info:
        read_jsonl(p)
    assert str(info.value) == f"{p}:2: not valid JSON (Expecting value at column 7)"
