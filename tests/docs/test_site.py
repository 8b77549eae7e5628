"""The documentation site: `mkdocs build --strict` (no broken link, anchor or API reference), the generated config
reference, and the front page in a real headless Chromium, served over http, whose search box finds "CTPO"."""

from __future__ import annotations

import dataclasses
import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..requirements import need
from ..viewer.browser import Browser, chromium_path

ROOT = Path(__file__).resolve().parents[2]


def _have_mkdocs() -> bool:
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
        import mkdocstrings  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need(_have_mkdocs(), "mkdocs, mkdocs-material or mkdocstrings is not installed (pip install -e '.[docs]')")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stderr[-6000:]}"
    return out


@pytest.mark.slow
def test_strict_build_has_every_page(site: Path) -> None:
    for page in ("index.html", "quickstart/index.html", "training/config/index.html", "reference/index.html",
                 "extending/sampler/index.html", "results/index.html", "search/search_index.json"):
        assert (site / page).is_file(), page


def test_config_reference_lists_every_field_of_every_section(site: Path) -> None:
    import typing

    from toolgym.training.config import TrainConfig

    html = (site / "training/config/index.html").read_text()
    todo, seen = [TrainConfig], set()
    while todo:
        cls = todo.pop()
        seen.add(cls.__name__)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            assert f"<code>{f.name}</code>" in html, f"{cls.__name__}.{f.name} is missing from the config reference"
            todo += [s for s in (hints[f.name], *typing.get_args(hints[f.name])) if dataclasses.is_dataclass(s)]
    assert {"ModelConfig", "LoraConfig", "RolloutConfig", "RayConfig"} <= seen
    assert "MOPDOptions" in html  # the algorithms' options sections are listed too


def test_readme_links_resolve_and_it_stays_short() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250, "README.md is for a first look: longer material goes into docs/"
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def served(site: Path) -> Iterator[str]:
    """The built site over http on 127.0.0.1 (Material's search runs in a web worker, which file:// refuses)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_front_page_renders_and_search_finds_ctpo(served: str, tmp_path: Path) -> None:
    need(chromium_path() is not None, "Chromium is not installed (scripts/setup.sh installs it)")
    with Browser(tmp_path / "browser", width=1280, height=900) as browser:
        page = browser.open(served)
        assert page.eval("document.title").startswith("toolgym")
        assert page.eval("document.querySelector('h1').firstChild.textContent").strip() == "toolgym"
        # the concepts diagram and the reading table are on the page, styled by the theme (not bare HTML)
        assert "TaskSource" in page.eval("[...document.querySelectorAll('.md-content pre')].map(e => e.textContent).join()")
        # the diagram fits the column at 1280 px: nothing of it is cut off behind a scroll bar
        width = page.eval("(() => { const c = document.querySelector('.md-content pre code'); "
                          "return [c.scrollWidth, c.clientWidth]; })()")
        assert width[0] <= width[1], f"the front page's diagram overflows: {width[0]} px in {width[1]} px"
        assert page.eval("getComputedStyle(document.querySelector('.md-header')).position") in ("sticky", "fixed")
        shot = page.screenshot(tmp_path / "front.png", height=900)
        assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
        dest = os.environ.get("TOOLGYM_SCREENSHOTS")
        if dest:
            Path(dest).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shot, Path(dest) / "site_front_page.png")

        page.click("label.md-search__icon, .md-search__input")
        page.type(".md-search__input", "CTPO")
        page.wait_for("document.querySelectorAll('.md-search-result__item').length > 0",
                      "search results for CTPO")
        meta = page.eval("document.querySelector('.md-search-result__meta').textContent")
        titles = page.eval("[...document.querySelectorAll('.md-search-result__item')].map(e => e.textContent)")
        assert any("CTPO" in t for t in titles), titles
        assert "matching" in meta.lower(), meta
        assert not page.exceptions()
