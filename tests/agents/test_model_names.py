"""Model names reach the samplers through the one resolver: a local copy of a tiny model (a plain
folder, or the Hugging Face cache layout a `hf download` leaves, loaded by its Hub id with
HF_HUB_OFFLINE=1), and `toolgym rollout --device cpu` with that model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from toolgym.agents.storage import read_header

TOOLGYM = [sys.executable, "-c", "from toolgym.cli import main; main()"]
HUB_ID = "toolgym-tests/tiny-qwen2"


def test_local_folder_loads_in_the_hf_sampler(tiny_dir: Path) -> None:
    from toolgym.agents.hf_sampler import HFSampler
    from toolgym.assets import resolve_model

    assert resolve_model(str(tiny_dir)) == str(tiny_dir)
    s = HFSampler(str(tiny_dir), str(tiny_dir), device="cpu")
    assert s.device == "cpu" and s.tokenizer is not None


def _fake_hub_cache(tiny_dir: Path, cache: Path) -> None:
    """What huggingface_hub leaves after downloading HUB_ID: blobs behind snapshots/<rev>/, refs/main."""
    repo = cache / ("models--" + HUB_ID.replace("/", "--"))
    rev = "0" * 40
    snap = repo / "snapshots" / rev
    snap.mkdir(parents=True)
    for f in tiny_dir.iterdir():
        if f.is_file():
            shutil.copy(f, snap / f.name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)


@pytest.mark.slow
def test_hub_id_in_the_local_hf_cache_loads_offline(tiny_dir: Path, tmp_path: Path) -> None:
    """A Hub id is handed to from_pretrained as the id: with HF_HUB_OFFLINE=1 it loads from the cache."""
    _fake_hub_cache(tiny_dir, tmp_path / "hub")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub")}
    code = ("from toolgym.assets import resolve_model\n"
            "from toolgym.agents.hf_sampler import HFSampler\n"
            f"print(resolve_model({HUB_ID!r}))\n"
            f"s = HFSampler({HUB_ID!r}, device='cpu')\n"
            "print(s.device, type(s.model).__name__, s.model.name_or_path)\n"
            "try:\n    resolve_model('toolgym-tests/not-cached')\nexcept Exception as e:\n    print(type(e).__name__)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == HUB_ID  # the id itself: transformers loads it (from the cache here)
    assert lines[1].startswith("cpu Qwen2ForCausalLM") and lines[2] == "AssetError"


@pytest.mark.slow
def test_rollout_device_cpu_reaches_the_sampler(tiny_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "roll.jsonl"
    r = subprocess.run([*TOOLGYM, "rollout", "toolgym/Arith-v0", "--model", str(tiny_dir), "--device", "cpu",
                        "--tasks", "1", "--group", "2", "--out", str(out), "--max-tokens", "4", "--max-turns", "1",
                        "--json"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout)["episodes"] == 2
    assert read_header(out)["meta"]["device"] == "cpu"


@pytest.mark.parametrize("sampler", ["openai"])
def test_rollout_device_is_for_the_hf_sampler(tiny_dir: Path, tmp_path: Path, sampler: str) -> None:
    r = subprocess.run([*TOOLGYM, "rollout", "toolgym/Arith-v0", "--model", str(tiny_dir), "--sampler", sampler,
                        "--device", "cpu", "--out", str(tmp_path / "x.jsonl")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert r.stderr.strip() == f"error: --device applies to --sampler hf; {sampler} places the model itself"
