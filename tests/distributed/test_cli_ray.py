"""`toolgym train CONFIG --ray ADDRESS`: the flag selects Ray rollouts; an unreachable head is one error line."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import yaml

from ..training.trainer_util import tiny_config

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
