"""`doctor_report`, backend choice, and the `toolgym sandbox` commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.requirements import need
from toolgym.errors import ToolgymError
from toolgym.sandbox import Limits, doctor_report, open_sandbox


def _cli(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from toolgym.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_doctor_report_explains_the_auto_choice():
    rep = doctor_report()
    assert rep["auto"] in ("docker", "local")
    assert rep["reason"]
    if rep["docker"]["engine"] and rep["docker"]["image_present"]:
        assert rep["auto"] == "docker"
    else:
        assert rep["auto"] == "local"
    assert "weaker" in rep["local"]["isolation"]
    json.dumps(rep)


def test_auto_opens_the_reported_backend():
    want = doctor_report()["auto"]
    with open_sandbox("auto", Limits(timeout_s=5), pool_size=1) as sb:
        assert sb.backend == want
        assert sb.run("print('auto')").stdout == "auto\n"


def test_unknown_backend_is_an_actionable_error():
    with pytest.raises(ToolgymError, match="unknown sandbox backend 'podman'; known: auto, docker, local"):
        open_sandbox("podman")


def test_cli_run_json_and_exit_status():
    p = _cli("sandbox", "run", "--backend", "local", "-c", "print(6*7)", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["status"] == "ok" and out["stdout"] == "42\n" and out["backend"] == "local"
    p = _cli("sandbox", "run", "--backend", "local", "-c", "raise SystemExit(3)")
    assert p.returncode == 1 and "status=error" in p.stderr


def test_cli_errors_are_one_line():
    p = _cli("sandbox", "run", "--backend", "local", "-l", "cobol", "-c", "x")
    assert p.returncode == 2
    assert p.stderr.strip().startswith("error:") and len(p.stderr.strip().splitlines()) == 1
    assert "Traceback" not in p.stderr


def test_cli_doctor_json():
    p = _cli("sandbox", "doctor", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["auto"] in ("docker", "local")


@pytest.mark.skipif(os.geteuid() != 0, reason="image builds need root")
@pytest.mark.docker
def test_build_image_is_idempotent():
    from tests.sandbox.conftest import docker_ready

    why = docker_ready()
    need(why is None, f"no Docker engine: {why}")
    p = _cli("sandbox", "build-image")
    assert p.returncode == 0 and "already present" in p.stderr
