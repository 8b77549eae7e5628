"""`toolgym doctor`: reports every part with a fix, and exits 0 whatever is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # measured over 1 s each (the fast tier leaves them out)

_SCRIPT = Path(sys.executable).parent / "toolgym"
CLI = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-c", "from toolgym.cli import main; main()"]
PARTS = {"docker engine", "sandbox image", "bubblewrap", "cgroups", "torch", "vllm", "ray"}


def doctor(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "doctor", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def test_doctor_json_lists_every_part_with_fixes(tmp_path: Path) -> None:
    r = doctor("--json", TOOLGYM_HOME=str(tmp_path))  # an empty cache: every asset is missing
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert PARTS <= set(checks)
    for c in report["checks"]:
        assert c["status"] in ("ok", "missing", "warn") and c["detail"]
        assert (c["fix"] is None) == (c["status"] == "ok"), c
    assets = [c for c in report["checks"] if c["name"].startswith("asset ")]
    assert assets and all(c["status"] == "missing" for c in assets)
    assert checks["asset humaneval"]["fix"] == "toolgym assets fetch humaneval"
    assert report["python"] == sys.version.split()[0]


def test_doctor_without_docker_engine_still_exits_0(tmp_path: Path) -> None:
    # a real fault: point the Docker SDK at a socket that does not exist
    r = doctor("--json", DOCKER_HOST=f"unix://{tmp_path}/no-docker.sock", TOOLGYM_HOME=str(tmp_path))
    assert r.returncode == 0, r.stderr
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    assert checks["docker engine"]["status"] == "missing"
    assert "dockerd" in checks["docker engine"]["fix"]
    assert checks["sandbox image"]["status"] != "ok"


def test_doctor_human_output(tmp_path: Path) -> None:
    r = doctor(TOOLGYM_HOME=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "docker engine" in r.stdout and "fix: toolgym assets fetch gsm8k" in r.stdout
    assert "Traceback" not in r.stderr
