"""A user at a shell: a fresh folder as the working directory, the installed `toolgym` command and the Python
of this environment, nothing of the repository on the path. The journey tests run every step through it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def readme_block(heading: str, path: Path = ROOT / "README.md") -> str:
    """The first ```python block under `## heading` of a Markdown file: the code a user copies."""
    text = path.read_text(encoding="utf-8")
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    m = re.search(r"```python\n(.*?)```", section, re.S)
    assert m, f"no python block under '## {heading}' in {path.name}"
    return m.group(1)


class User:
    """Runs commands in `home` as a user would type them; each returns the finished process."""

    def __init__(self, home: Path) -> None:
        self.home = home
        home.mkdir(parents=True, exist_ok=True)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "TOOLGYM_TEST"))}

    def write(self, name: str, text: str) -> Path:
        p = self.home / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
        return p

    def run(self, *argv: str, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess:
        """`argv[0]` is `toolgym`, `python` or a path; the others are passed as typed."""
        exe = {"toolgym": str(BIN / "toolgym"), "python": sys.executable}.get(argv[0], argv[0])
        r = subprocess.run([exe, *argv[1:]], cwd=self.home, env=self.env, capture_output=True, text=True,
                           timeout=timeout, stdin=subprocess.DEVNULL)
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {r.returncode}\nstdout:\n{r.stdout[-3000:]}\n"
                                 f"stderr:\n{r.stderr[-3000:]}")
        return r
