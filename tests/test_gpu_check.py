"""scripts/gpu_check.py, the prepared GPU check, in its CPU form (``--device cpu --tiny``): every part runs, so the
script a GPU session runs once, with minutes of device time, does not fail on something a CPU could have caught."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_check_cpu_form_runs_every_part(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--device", "cpu", "--tiny",
                        "--work", str(tmp_path / "work"), "--out", str(out)],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    report = json.loads(out.read_text())
    train = report["train"]
    assert set(train) == {"ctpo-full", "ctpo-lora", "mopd-full", "mopd-lora"}
    assert [train[k]["steps"] for k in sorted(train)] == [5, 5, 2, 2]
    assert any(abs(x) > 0 for x in train["ctpo-full"]["loss"])  # the signal reward gives the updates a gradient
    assert report["trl"]["steps"] == 2 and report["verl"]["cpu"]["clipfrac"] > 0
    assert "vLLM is not installed" in report["vllm"].get("skipped", "") or report["vllm"]["steps"] == 2


def test_gpu_check_without_cuda_says_so_in_one_line() -> None:
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py")], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 2 and p.stdout.strip().splitlines() == [
        "gpu_check: no CUDA device visible (torch.cuda.is_available() is False); use --device cpu --tiny for the CPU form"]
