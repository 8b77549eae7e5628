"""What a newcomer sees at the top of the repository: text files only (no stray wheel or archive), a LICENSE that
matches pyproject.toml, figures under docs/assets/ rather than between the pages, no tracked file that .gitignore
names as an output, and pytest refusing a marker nobody registered (a typo such as ``@pytest.mark.slwo`` would
otherwise select nothing, silently)."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IMAGES = (".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp")


def is_binary(path: Path) -> bool:
    """Git's own test: a NUL byte in the first 8000 bytes."""
    with path.open("rb") as f:
        return b"\0" in f.read(8000)


def top_level_files() -> list[Path]:
    """The files at the top that are or could be committed: tracked, or untracked and not ignored. A copy without
    git metadata (the device machine's) falls back to what is on disk."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, check=True, timeout=60).stdout.decode()
    except (OSError, subprocess.SubprocessError):
        return [p for p in ROOT.iterdir() if p.is_file() and not p.name.startswith(".")]
    return [ROOT / name for name in out.split("\0") if name and "/" not in name and (ROOT / name).is_file()]


def test_the_check_catches_a_wheel_and_passes_text(tmp_path: Path) -> None:
    wheel = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("pkg/__init__.py", "")
    text = tmp_path / "NOTES.md"
    text.write_text("# notes\nplain text, unicode too: ±\n")
    assert is_binary(wheel)
    assert not is_binary(text)


def test_no_binary_file_at_the_top_level() -> None:
    files = top_level_files()
    assert {"README.md", "pyproject.toml", "LICENSE"} <= {p.name for p in files}
    binary = sorted(p.name for p in files if is_binary(p))
    assert not binary, f"binary files at the repository's top level: {binary} (artifacts belong elsewhere or nowhere)"


def test_no_tracked_file_is_one_gitignore_names_an_output() -> None:
    """Run folders, build trees, caches and the screenshot tests/docs/test_site.py copies out are ignored; one
    committed anyway (`git add -f`, or before its pattern was added) is a test's or a run's output in the tree."""
    if not (ROOT / ".git").exists():
        pytest.skip("a copy without git metadata (the device machine's) tracks nothing")
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--ignored", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, check=True, timeout=60).stdout.decode()
    tracked = sorted(name for name in out.split("\0") if name)
    assert not tracked, f"tracked files that .gitignore names as outputs: {tracked} (git rm --cached them)"


def test_license_is_the_apache_text_pyproject_names() -> None:
    declared = re.search(r'^license = \{ text = "([^"]+)" \}$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert declared and declared[1] == "Apache-2.0"  # (tomllib is 3.11+; the project supports 3.10)
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the whole text, not a stub


def test_figures_live_in_docs_assets_and_every_one_is_used() -> None:
    assert not [p.name for p in (ROOT / "docs").iterdir() if p.suffix.lower() in IMAGES]
    pages = "\n".join(p.read_text() for p in (ROOT / "docs").rglob("*.md")) + (ROOT / "README.md").read_text()
    unused = [p.name for p in (ROOT / "docs" / "assets").iterdir() if p.suffix.lower() in IMAGES
              and f"assets/{p.name}" not in pages]
    assert not unused, f"figures no page shows (a test's screenshot committed by mistake?): {unused}"


def test_an_unregistered_marker_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "test_typo.py").write_text("import pytest\n\n@pytest.mark.slwo\ndef test_x():\n    pass\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir",
                          str(tmp_path), "-p", "no:cacheprovider", "-q", str(tmp_path / "test_typo.py")],
                         capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert out.returncode != 0, out.stdout[-2000:]
    assert "'slwo' not found in `markers` configuration option" in out.stdout + out.stderr


def test_the_commit_msg_hook_refuses_a_subject_over_72_characters(tmp_path) -> None:
    import subprocess

    hook = ROOT / "scripts" / "hooks" / "commit-msg"
    ok, long = tmp_path / "ok", tmp_path / "long"
    ok.write_text("x" * 72 + "\n\n" + "a body line longer than seventy-two characters is fine " * 3 + "\n")
    long.write_text("# a comment git strips\n" + "y" * 73 + "\n")
    assert subprocess.run([str(hook), str(ok)], capture_output=True).returncode == 0
    res = subprocess.run([str(hook), str(long)], capture_output=True, text=True)
    assert res.returncode == 1 and "73 characters" in res.stderr
