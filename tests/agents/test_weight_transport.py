"""The space decision of a weight push: /dev/shm when the weights (in the engine's dtype) fit, else a temp
folder on disk, else one actionable line. The real engine on a real tiny tmpfs: tests/training/test_vllm_push.py."""

from __future__ import annotations

import pytest

from toolgym.agents.weight_transport import HEADROOM, choose_route, decide
from toolgym.errors import ConfigError

MB = 2**20
QWEN_05B_BF16 = 494_032_768 * 2  # Qwen2.5-0.5B's parameters in the engine's bf16


def test_a_container_default_shm_cannot_hold_a_small_model_so_the_push_goes_to_disk():
    route = decide(QWEN_05B_BF16, shm_free=64 * MB, disk_free=50_000 * MB, disk_dir="/tmp")
    assert route.kind == "disk" and route.folder == "/tmp"
    assert "\n" not in route.note and "64.0 MB free" in route.note and "--shm-size" in route.note
    big = decide(QWEN_05B_BF16, shm_free=8_000 * MB, disk_free=50_000 * MB)
    assert big.kind == "shm" and big.folder == "/dev/shm" and "/dev/shm" in big.note


def test_the_boundary_counts_the_headroom():
    assert decide(10 * MB, shm_free=10 * MB + HEADROOM, disk_free=None).kind == "shm"
    assert decide(10 * MB, shm_free=10 * MB + HEADROOM - 1, disk_free=100 * MB).kind == "disk"


def test_no_shm_at_all_and_no_room_anywhere():
    route = decide(5 * MB, shm_free=None, disk_free=100 * MB, disk_dir="/scratch")
    assert route.kind == "disk" and "not writable" in route.note
    with pytest.raises(ConfigError, match="TMPDIR") as err:
        decide(5 * MB, shm_free=1 * MB, disk_free=2 * MB, disk_dir="/scratch")
    assert "\n" not in str(err.value) and "/scratch" in str(err.value)


def test_choose_route_measures_the_real_folders(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    assert choose_route(1024, shm_dir=str(shm), disk_dir=str(tmp_path)).kind == "shm"  # a folder with room
    missing = choose_route(1024, shm_dir=str(tmp_path / "absent"), disk_dir=str(tmp_path))
    assert missing.kind == "disk" and missing.folder == str(tmp_path)
