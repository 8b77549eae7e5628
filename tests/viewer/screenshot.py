"""A screenshot of the viewer on a rollout file, filtered to one task, for docs/assets (not a test):

    .venv/bin/python -m tests.viewer.screenshot STEP.jsonl TASK OUT.png [HEIGHT]

It renders the page with `toolgym rollouts view --out` and takes the shot in the headless Chromium the viewer
tests use (tests/viewer/browser.py)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from .browser import Browser
from .cli_util import view_out

READY = "document.getElementById('list').dataset.state === 'ready'"


def main(step: str, task: str, out: str, height: int = 1300) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        html = Path(tmp) / "page.html"
        view_out(Path(step), html)
        with Browser(Path(tmp) / "browser") as browser:
            page = browser.open(html.as_uri())
            page.wait_for(READY, "the episodes to load")
            n = int(page.eval("+document.getElementById('list').dataset.renders"))
            page.paste("#f-task", task)
            page.wait_for(f"+document.getElementById('list').dataset.renders > {n}", "the list to be drawn again")
            page.wait_for(READY, "the episodes to load")
            page.screenshot(Path(out), height=height)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], *(int(a) for a in sys.argv[4:5]))
