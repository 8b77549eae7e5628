"""Source strings of local benchmark files (`toolgym.envs.tasks.catalog`), each against a small fixture
written here in the published format."""

from __future__ import annotations

import base64
import csv
import json
import pickle
import zlib
from pathlib import Path

import pytest

from toolgym.envs.tasks.catalog import load
from toolgym.envs.tasks.gpqa import load_csv as load_gpqa_records
from toolgym.envs.tasks.livecodebench import decode_tests
from toolgym.errors import AssetError, ConfigError


def load_livecodebench(path, **opts):
    return load(f"livecodebench:{path}", style="generate", options=opts).tasks


def _pickled(obj) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(obj))).decode()


class _Evil:
    def __reduce__(self):  # would run os.system on a plain pickle.loads
        import os

        return (os.system, ("echo pwned",))


def _lcb_rows() -> list[dict]:
    stdin_public = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]
    stdin_private = [{"input": "5 7\n", "output": "12\n", "testtype": "stdin"}]
    func_public = [{"input": "[2,7,11,15]\n9", "output": "[0, 1]", "testtype": "functional"}]
    return [
        {"question_title": "Add", "question_content": "Read a and b, print a+b.", "platform": "atcoder",
         "question_id": "abc001_a", "contest_id": "abc001", "contest_date": "2024-09-01T00:00:00",
         "starter_code": "", "difficulty": "easy", "public_test_cases": json.dumps(stdin_public),
         "private_test_cases": json.dumps(stdin_private), "metadata": "{}"},
        {"question_title": "Two Sum", "question_content": "Return indices of two numbers adding to target.",
         "platform": "leetcode", "question_id": "1", "contest_id": "w1", "contest_date": "2023-05-01T00:00:00",
         "starter_code": "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        ",
         "difficulty": "easy", "public_test_cases": json.dumps(func_public),
         "private_test_cases": _pickled(json.dumps([{"input": "[3,3]\n6", "output": "[0, 1]",
                                                     "testtype": "functional"}])),
         "metadata": json.dumps({"func_name": "twoSum"})},
    ]


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_livecodebench_stdin_and_functional(tmp_path: Path) -> None:
    _write_jsonl(tmp_path / "test.jsonl", _lcb_rows()[:1])
    _write_jsonl(tmp_path / "test2.jsonl", _lcb_rows()[1:])
    (tmp_path / "README.md").write_text("not data")
    with pytest.raises(ConfigError, match="--trust-pickle"):
        load_livecodebench(tmp_path)
    tasks = load_livecodebench(tmp_path, trust_pickle=True)
    assert [t.id for t in tasks] == ["abc001_a", "1"]
    stdin, func = tasks
    s, f = stdin.ground_truth, func.ground_truth
    assert s["mode"] == "stdio" and [(c["input"], c["output"]) for c in s["hidden"]] == [("1 2\n", "3\n"), ("5 7\n", "12\n")]
    assert f["mode"] == "function" and "from typing import" in f["prefix"]
    # call form (judged in the sandbox: tests/envs/tasks/test_livecodebench.py), one JSON value per input line
    assert [(t["call"], t["args"], t["expected"]) for t in f["hidden"]] == [
        ("Solution().twoSum", [[2, 7, 11, 15], 9], [0, 1]), ("Solution().twoSum", [[3, 3], 6], [0, 1])]
    assert [t.id for t in load_livecodebench(tmp_path, trust_pickle=True, since="2024-01-01")] == ["abc001_a"]


def test_livecodebench_restricted_unpickler_refuses_globals(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="refusing to load"):
        decode_tests(_pickled(_Evil()), trust_pickle=True, where="x")
    assert decode_tests(_pickled(json.dumps([{"input": "1", "output": "2"}])), trust_pickle=True) == [
        {"input": "1", "output": "2"}]


def test_codecontests(tmp_path: Path) -> None:
    row = {"name": "1548_A. Web of Lies", "description": "Print the sum.", "difficulty": 7, "cf_rating": 1400,
           "time_limit": {"seconds": 2, "nanos": 500000000}, "memory_limit_bytes": 256000000,
           "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
           "private_tests": {"input": ["2 2\n", "0 0\n"], "output": ["4\n", "0\n"]},
           "generated_tests": {"input": [], "output": []}}
    f = _write_jsonl(tmp_path / "cc.jsonl", [row])
    (t,) = load(f"codecontests:{f}", style="generate").tasks
    gt = t.ground_truth
    assert t.id == "1548_A. Web of Lies" and gt["mode"] == "stdio" and gt["judge"] == {"time_limit_s": 2.5}
    assert [(c["input"], c["output"]) for c in gt["hidden"]] == [("1 2\n", "3\n"), ("2 2\n", "4\n"), ("0 0\n", "0\n")]
    assert len(gt["public"]) == 1
    with pytest.raises(AssetError):
        load(f"codecontests:{tmp_path / 'missing.jsonl'}")


def test_gpqa_official_csv(tmp_path: Path) -> None:
    cols = ["Pre-Revision Question", "Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2",
            "Incorrect Answer 3", "Explanation", "Record ID", "High-level domain", "Subdomain"]
    rows = [["", f"Q{i}?", f"right{i}", f"w1{i}", f"w2{i}", f"w3{i}", "", f"rec{i}", "Physics", "Optics"]
            for i in range(12)]
    path = tmp_path / "gpqa_diamond.csv"
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        w.writerows(rows)
    recs = load_gpqa_records(path, seed=0)
    assert len(recs) == 12
    for i, r in enumerate(recs):
        assert sorted(r["choices"]) == sorted([f"right{i}", f"w1{i}", f"w2{i}", f"w3{i}"])
        assert r["choices"][r["labels"].index(r["answer"])] == f"right{i}"
    assert len({r["answer"] for r in recs}) > 1  # shuffled: the gold is not always in one place
    assert load_gpqa_records(path, seed=0) == recs  # reproducible
    bad = tmp_path / "bad.csv"
    bad.write_text("Question,Answer\nq,a\n")
    with pytest.raises(ConfigError, match="missing column"):
        load_gpqa_records(bad)
