"""The markers say what each test needs: ``-m "not docker"`` runs nothing that opens a docker sandbox."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # measured over 1 s each (the fast tier leaves them out)

ROOT = Path(__file__).resolve().parents[1]
FILES = ["tests/sandbox/test_kattis_judge.py", "tests/sandbox/test_docker_config.py",
         "tests/sandbox/test_pool.py", "tests/integrations/test_verl.py"]


def _collected(marker: str) -> set[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "-m", marker, *FILES], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode in (0, 5), out.stdout[-2000:] + out.stderr[-2000:]
    return {line for line in out.stdout.splitlines() if "::" in line}


def test_docker_marker_covers_parametrized_and_named_docker_tests() -> None:
    docker = _collected("docker")
    assert "tests/sandbox/test_pool.py::test_atexit_cleans_up[docker]" in docker
    assert "tests/sandbox/test_pool.py::test_atexit_cleans_up[local]" not in docker
    assert "tests/sandbox/test_docker_config.py::test_container_is_locked_down" in docker
    assert "tests/sandbox/test_kattis_judge.py::test_problemtools_examples_get_the_verdict_of_their_folder" in docker
    assert "tests/integrations/test_verl.py::test_code_reward_judges_in_the_docker_sandbox" in docker
    rest = _collected("not docker")
    assert rest and not rest & docker
    assert not [t for t in rest if "[docker" in t or "docker]" in t]
