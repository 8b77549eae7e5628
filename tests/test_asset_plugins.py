"""Assets are plug-ins like every other kind: a package's entry point in the ``toolgym.assets`` group adds an
asset (its spec, naming its builder by ``module:attr``), which ``toolgym assets list``, ``fetch`` and
``load_records`` then know; a builder that cannot be imported is one line naming it."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from toolgym import assets
from toolgym.errors import AssetError

WORDS = b"alpha\nbeta\ngamma\n"
FIXTURE = '''
import json
from toolgym.assets import AssetSpec, register_asset
from toolgym._assets.download import Archive

def build(spec, archive, out, scratch, progress):
    words = archive.read_text().split()
    with open(out / "test.jsonl", "w") as f:
        for i, w in enumerate(words):
            f.write(json.dumps({"id": str(i), "question": w, "answer": w.upper()}) + "\\n")
    return {"splits": {"test": len(words)}}

ARCHIVE = Archive("pypi", "tg-words", "1.0", "tg_words-1.0.txt", SHA, keep=True)
SPEC = AssetSpec("tg-words", "dataset", "three words", ARCHIVE, "MIT", schema="words", splits={"test": 3},
                 default_split="test", builder="tg_asset_fixture:build")

def hook():
    register_asset(AssetSpec("tg-words-hooked", "dataset", "the same words, added by a hook", ARCHIVE, "MIT",
                             splits={"test": 3}, default_split="test", builder=build))

GONE = AssetSpec("tg-words-gone", "dataset", "its builder's module is not installed", ARCHIVE, "MIT",
                 splits={"test": 3}, default_split="test", builder="tg_asset_missing_module:build")
'''


@pytest.fixture
def plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A distribution on sys.path whose entry points add assets, and a cache whose downloads already hold the
    words file (the reuse path of a real fetch: no registry is asked)."""
    site = tmp_path / "site"
    site.mkdir()
    sha = hashlib.sha256(WORDS).hexdigest()
    (site / "tg_asset_fixture.py").write_text(f"SHA = {sha!r}\n" + FIXTURE)
    dist = site / "tg_asset_fixture-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: tg-asset-fixture\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[toolgym.assets]\ntg-words = tg_asset_fixture:SPEC\nhooked = tg_asset_fixture:hook\n"
        "tg-words-gone = tg_asset_fixture:GONE\ntg-words-broken = tg_asset_missing_module:SPEC\n")
    home = tmp_path / "home"
    (home / ".downloads").mkdir(parents=True)
    (home / ".downloads" / "tg_words-1.0.txt").write_bytes(WORDS)
    monkeypatch.setenv("TOOLGYM_HOME", str(home))
    sys.path.insert(0, str(site))
    assets.ASSETS.load_plugins(force=True)
    yield home
    sys.path.remove(str(site))
    sys.modules.pop("tg_asset_fixture", None)
    for name in ("tg-words", "tg-words-hooked", "tg-words-gone"):
        assets.ASSETS.pop(name, None)
    assets.ASSETS.errors.clear()


def test_an_entry_point_adds_an_asset_that_fetch_builds_with_its_builder(plugin: Path) -> None:
    assert "tg-words" in assets.KNOWN_ASSETS and "tg-words" in [r["name"] for r in assets.list_assets()]
    records = assets.load_records("tg-words")
    assert [(r["question"], r["answer"]) for r in records] == [("alpha", "ALPHA"), ("beta", "BETA"), ("gamma", "GAMMA")]
    assert (plugin / "tg-words" / "metadata.json").is_file()
    assert [r["question"] for r in assets.load_records("tg-words-hooked")] == ["alpha", "beta", "gamma"]  # a hook's


def test_a_broken_plug_in_and_an_unimportable_builder_are_one_line_naming_them(plugin: Path) -> None:
    with pytest.raises(AssetError) as e:
        assets.fetch("tg-words-broken")
    assert str(e.value).startswith("unknown asset 'tg-words-broken'")
    assert "the plug-in tg-words-broken (tg_asset_missing_module:SPEC) failed to load: ModuleNotFoundError" in str(e.value)
    with pytest.raises(AssetError) as e:
        assets.fetch("tg-words-gone")
    assert str(e.value) == ("the plug-in asset builder 'tg-words-gone' (tg_asset_missing_module:build) failed to "
                            "load: ModuleNotFoundError: No module named 'tg_asset_missing_module' (is its package "
                            "installed in this environment?)")
    assert not (plugin / "tg-words-gone").exists()  # nothing half-built is left as an entry


def test_every_built_in_asset_names_an_importable_builder() -> None:
    from toolgym._registry import import_reference

    for name, spec in assets.KNOWN_ASSETS.items():
        assert callable(import_reference(spec.builder)), name
    with pytest.raises(AssetError, match="builder must be a function or 'module:attr'; got 'olmo'"):
        assets.register_asset(assets.AssetSpec("x", "dataset", "", spec.archive, "MIT", builder="olmo"))
    assert "x" not in assets.KNOWN_ASSETS


def test_importing_assets_reads_no_entry_point() -> None:
    code = "import toolgym.assets as a; print(a.ASSETS._loaded, len(a.ASSETS._entries))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split()[0] == "False" and int(out.stdout.split()[1]) >= 15
