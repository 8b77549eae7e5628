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

from tests.requirements import need

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


def test_server_actors_on_one_cpu_node_get_their_own_cores(ray_cluster):
    """Actors start their servers in their own processes, so the driver hands each its share (vLLM's own choice
    would bind every server on the node to the same first cores); on GPUs vLLM chooses."""
    from toolgym.distributed.ray_servers import _core_shares

    cores = os.sched_getaffinity(0)
    need(len(cores) >= 2, "one core: two servers cannot have their own")
    shares = [{int(c) for c in s.split(",")} for s in _core_shares(ray_cluster, 2, 0.0)]
    assert shares[0] and shares[1] and not shares[0] & shares[1] and shares[0] | shares[1] <= cores
    assert _core_shares(ray_cluster, 2, 1.0) == [None, None]
    assert _core_shares(ray_cluster, 1, 0.0) == [None]
