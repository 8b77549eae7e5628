"""docs/examples.md indexes `examples/`: every file there (build outputs aside) is named on the page."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD_OUTPUTS = ("build", "__pycache__", ".egg-info")


def example_files() -> list[str]:
    out = []
    for p in sorted((ROOT / "examples").rglob("*")):
        rel = p.relative_to(ROOT / "examples")
        if p.is_file() and not any(part.endswith(BUILD_OUTPUTS) or part in BUILD_OUTPUTS for part in rel.parts):
            out.append(rel.as_posix())
    return out


def test_every_example_file_is_on_the_examples_page() -> None:
    page = (ROOT / "docs" / "examples.md").read_text()
    files = example_files()
    assert "arith_ctpo.yaml" in files and "plugin_env/pyproject.toml" in files
    for rel in files:
        top, _, inner = rel.partition("/")
        named = f"`examples/{rel}`" in page or (inner and f"`examples/{top}/`" in page and inner in page)
        assert named, f"examples/{rel} is not on docs/examples.md: add a row saying what it does and its command"
