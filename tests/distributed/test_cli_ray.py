"""`toolgym train CONFIG --ray ADDRESS`: against a cluster from `ray start --head` (its own processes, as
on a multi-node cluster's head, on loopback); an unreachable head is one error line."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from ..training.trainer_util import tiny_config

pytestmark = pytest.mark.slow  # measured over 1 s each (the fast tier leaves them out)

TOOLGYM = str(Path(sys.executable).parent / "toolgym")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ray_flag_with_no_cluster_there_fails_with_one_line(tmp_path):
    cfg = tiny_config(tmp_path / "run", steps=1, sft={"enabled": False})
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    addr = f"127.0.0.1:{_free_port()}"
    res = subprocess.run([TOOLGYM, "train", str(path), "--no-progress", "--ray", addr], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "ray.address" in lines[0] and addr in lines[0], res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["distributed"] == "ray" and saved["ray"]["address"] == addr


def test_train_on_a_cluster_started_with_ray_start(tmp_path):
    port = _free_port()
    env = dict(os.environ, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_memory_monitor_refresh_ms="0")
    head = subprocess.Popen([str(Path(sys.executable).parent / "ray"), "start", "--head", "--port", str(port),
                             "--node-ip-address", "127.0.0.1", "--num-cpus", "2", "--include-dashboard=false",
                             "--block"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:  # the head is up when its GCS port answers
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert head.poll() is None and time.monotonic() < deadline, "ray start --head did not come up"
                time.sleep(0.5)
        cfg = tiny_config(tmp_path / "run", steps=1, sft={"enabled": False}, ray={"num_workers": 2})
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump(cfg))
        res = subprocess.run([TOOLGYM, "train", str(path), "--no-progress", "--ray", f"127.0.0.1:{port}"],
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        pool = json.loads((tmp_path / "run" / "ray_pool.json").read_text())
        assert pool["stats"]["completed"] == cfg["rollout"]["prompts_per_step"]
        assert [w["groups_done"] > 0 for w in pool["workers"]] == [True, True]
    finally:
        os.killpg(head.pid, signal.SIGTERM)  # ray start --block stops the processes it started
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, signal.SIGKILL)
            head.wait(timeout=30)
        marker = Path("/tmp/ray/ray_current_cluster")  # what `ray stop` would remove: keep ray.init() from
        if marker.exists() and marker.read_text().strip() == f"127.0.0.1:{port}":  # finding a dead cluster
            marker.unlink()
