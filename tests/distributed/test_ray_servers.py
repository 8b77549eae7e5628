"""Server actors on a Ray cluster (``distributed: ray`` with ``vllm_server``): a server that cannot start ends
the run with one line, its own reason, from ``toolgym train`` on a local cluster. (Actors that start and take
weights: tests/distributed/test_server_workers.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ..training.trainer_util import tiny_config

pytestmark = pytest.mark.slow  # a local Ray cluster and a trainer: ~12 s

TOOLGYM = str(Path(sys.executable).parent / "toolgym")


def test_a_server_actor_that_cannot_start_says_why_in_one_line(tmp_path):
    cfg = tiny_config(tmp_path / "run", steps=1, sft={"enabled": False}, distributed="ray",
                      ray={"num_workers": 1, "num_cpus": 2})
    cfg["rollout"].update(sampler="vllm_server", sandbox=None, sampler_kwargs={"python": "/nonexistent/python"})
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    res = subprocess.run([TOOLGYM, "train", str(path), "--no-progress"], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path, env={**os.environ, "RAY_memory_monitor_refresh_ms": "0"})
    assert res.returncode != 0
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert lines == ["error: a server actor failed to start: no Python at /nonexistent/python "
                     "(rollout.sampler_kwargs.python or TOOLGYM_VLLM_PYTHON)"], res.stderr[-3000:]
    assert "Traceback" not in res.stderr
