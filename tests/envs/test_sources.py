"""Task sources: files of every supported format, asset datasets, generators, splits, validation."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from toolgym.envs.sources import (
    GeneratorSource,
    ListSource,
    TaskValidationError,
    load_source,
    read_records,
)
from toolgym.envs.tasks.math_tir import math_adapter
from toolgym.envs.types import Task
from toolgym.errors import ConfigError

ROWS = [{"id": f"q{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i)} for i in range(20)]


def write_hf_dataset(folder, rows):
    """The layout `datasets.Dataset.save_to_disk` writes: an Arrow stream file plus state.json."""
    folder.mkdir(parents=True)
    table = pa.Table.from_pylist(rows)
    with pa.OSFile(str(folder / "data-00000-of-00001.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
    (folder / "dataset_info.json").write_text("{}")


@pytest.fixture
def files(tmp_path):
    p = {}
    p["jsonl"] = tmp_path / "t.jsonl"
    p["jsonl"].write_text("\n".join(json.dumps(r) for r in ROWS) + "\n\n")
    p["json"] = tmp_path / "t.json"
    p["json"].write_text(json.dumps(ROWS))
    p["parquet"] = tmp_path / "t.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), p["parquet"])
    p["csv"] = tmp_path / "t.csv"
    p["csv"].write_text("id,question,answer\n" + "".join(f"{r['id']},{r['question']},{r['answer']}\n" for r in ROWS))
    p["hf"] = tmp_path / "hf"
    write_hf_dataset(p["hf"], ROWS)
    dd = tmp_path / "hfdict"
    write_hf_dataset(dd / "train", ROWS[:15])
    write_hf_dataset(dd / "test", ROWS[15:])
    (dd / "dataset_dict.json").write_text(json.dumps({"splits": ["train", "test"]}))
    p["hfdict"] = dd
    return p


@pytest.mark.parametrize("kind", ["jsonl", "json", "parquet", "csv", "hf"])
def test_every_format_reads_the_same_tasks(files, kind):
    src = load_source(files[kind], adapter=math_adapter)
    assert src.size == len(ROWS)
    t = src.get(3)
    assert t.id == "q3" and t.prompt == [{"role": "user", "content": "What is 3 + 3?"}] and t.ground_truth == "6"


def test_hf_dataset_dict_splits(files):
    assert load_source(files["hfdict"], adapter=math_adapter, split="test").size == 5
    assert load_source(files["hfdict"], adapter=math_adapter, split="train").size == 15
    with pytest.raises(ConfigError, match="choose one"):
        read_records(files["hfdict"])
    with pytest.raises(ConfigError, match="no split 'dev'"):
        read_records(files["hfdict"], split="dev")


def test_json_with_split_keys(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps({"train": ROWS[:2], "test": ROWS[2:5]}))
    assert len(read_records(p, split="test")) == 3


def test_validation_errors_name_row_and_field(tmp_path):
    bad = [dict(ROWS[0]), {"id": "x", "answer": "1"}, dict(ROWS[2])]
    with pytest.raises(TaskValidationError, match=r"row 1: field 'question' is missing"):
        load_source(bad, adapter=math_adapter)
    with pytest.raises(TaskValidationError, match=r"row 0: field 'question' must be str, got int"):
        load_source([{"question": 5, "answer": "1"}], adapter=math_adapter)
    with pytest.raises(TaskValidationError, match=r"row 0: field 'answer'"):
        load_source([{"question": "q", "answer": ""}], adapter=math_adapter)
    p = tmp_path / "broken.jsonl"
    p.write_text('{"question": "a", "answer": "1"}\n{not json\n')
    with pytest.raises(TaskValidationError, match=r"broken\.jsonl:2: not valid JSON"):
        read_records(p)
    with pytest.raises(ConfigError, match="does not exist"):
        read_records(tmp_path / "missing.jsonl")
    with pytest.raises(ConfigError, match="unsupported"):
        (tmp_path / "x.txt").write_text("hi")
        read_records(tmp_path / "x.txt")


def test_generic_adapter_messages_and_bad_messages():
    src = load_source([{"prompt": [{"role": "user", "content": "hi"}], "ground_truth": "x"}])
    assert src.get(0).prompt[0]["content"] == "hi"
    with pytest.raises(TaskValidationError, match="row 0: field 'prompt' item 0"):
        load_source([{"prompt": [{"content": "no role"}]}])


def test_split_is_deterministic_disjoint_and_order_independent():
    src = load_source(ROWS, adapter=math_adapter)
    train, test = src.split(test_fraction=0.3, seed=1)
    ids_train, ids_test = {t.id for t in train}, {t.id for t in test}
    assert ids_train.isdisjoint(ids_test) and len(ids_train | ids_test) == len(ROWS)
    assert 0 < len(ids_test) < len(ROWS)
    rev = load_source(list(reversed(ROWS)), adapter=math_adapter)
    assert {t.id for t in rev.split(test_fraction=0.3, seed=1)[1]} == ids_test
    assert all(t.metadata["split"] == "test" for t in test)
    with pytest.raises(ConfigError):
        src.split(test_fraction=2)


def test_generator_source_is_unbounded_and_deterministic():
    g = GeneratorSource(lambda i: Task(id=str(i), prompt=[{"role": "user", "content": str(i * i)}]))
    assert g.get(10**12).id == str(10**12)
    assert g.get(7) == g.get(7)
    with pytest.raises(TypeError):
        len(g)
    with pytest.raises(ConfigError):
        g.split()


def test_list_source_of_tasks():
    tasks = [Task(id="a", prompt=[{"role": "user", "content": "x"}])]
    assert load_source(tasks).get(0).id == "a"
    assert isinstance(load_source(tasks), ListSource)


def test_asset_datasets_through_toolgym_assets():
    """The cached GSM8K (fetched through toolgym.assets when missing)."""
    src = load_source("gsm8k", adapter=math_adapter, limit=5)
    assert src.size == 5
    assert all(t.prompt[0]["content"] and t.ground_truth for t in src)
    same = load_source("asset:gsm8k", adapter=math_adapter, limit=5)
    assert [t.id for t in same] == [t.id for t in src]


def test_a_jsonl_task_file_names_lines_as_an_editor_does(tmp_path):
    """A bad record and a bad line of the same file are numbered alike: 1-based, blank lines counted."""
    p = tmp_path / "t.jsonl"
    p.write_text('{"question": "1+1", "answer": "2"}\n\n{"answer": "3"}\n')
    with pytest.raises(TaskValidationError, match=r"^t\.jsonl:3: field 'question' \(or 'prompt'\) is missing$"):
        load_source(str(p))
    p.write_text('{"question": "1+1", "answer": "2"}\n\n{"answer": \n')
    with pytest.raises(TaskValidationError, match=r"^t\.jsonl:3: not valid JSON"):
        load_source(str(p))
