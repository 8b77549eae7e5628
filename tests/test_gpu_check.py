"""scripts/gpu_check.py, the device check, in its CPU form (``--device cpu --tiny --image``): every part runs under
the GPU image's import rules (tests/gpu_image.py), so the script a GPU session runs once, with minutes of device
time, does not fail on something a CPU could have caught (a missing import, a skipped test, a broken part)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "scripts" / "gpu_check.py")
# a few device_standin tests that need what cannot travel: TRL's (a tiny model for the asset) and verl's (Ray)
STANDIN = ("tests/integrations/test_trl.py::test_trl_compute_loss_on_the_device "
           "tests/integrations/test_verl.py::test_verls_ppo_loss_on_the_device")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}


@pytest.mark.slow  # tens of seconds: seven parts, four of them training
def test_the_cpu_form_under_the_image_rules_passes_every_part(tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, SCRIPT, "--device", "cpu", "--tiny", "--image", "--budget", "300",
                        "--work", str(tmp_path / "work"), "--out", str(out), "--standin-args", STANDIN],
                       capture_output=True, text=True, timeout=600, env=_env())
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    parts = report["parts"]
    assert report["verdict"] == "pass" and list(parts) == ["probe", "standin", "equality", "memory", "ctpo", "pipeline",
                                                                 "trl"]
    assert all(v["status"] == "pass" and v["assertions"] for v in parts.values())
    assert parts["probe"]["result"]["ray"].startswith("stand-in")  # Ray is hidden here as it is absent there
    standin = parts["standin"]["result"]
    assert standin["passed"] == 3 and standin["skipped"] == [] and standin["failed"] == []  # trl's is parametrized x2
    assert (out / "standin.xml").exists()
    eq = parts["equality"]["result"]
    assert eq["dev fp32 shared"]["share_prompt_used"] and not eq["dev fp32 per-row"]["share_prompt_used"]
    assert all(r["clip_frac"] == 0 for r in eq.values())
    assert [parts["ctpo"]["result"][k]["steps"] for k in ("full", "lora")] == [3, 3]
    assert parts["trl"]["result"]["steps"] == 2
    pipe = parts["pipeline"]["result"]
    assert pipe["k0"]["steps"] == pipe["k1"]["steps"] == 4 and pipe["k1"]["staleness"] == [0.0, 1.0, 1.0, 1.0]
    # the deadlines are carved from the one budget: no part may run past its end
    assert all(v["start_s"] + v["deadline_s"] <= report["budget_s"] + 0.5 for v in parts.values())


def test_a_part_past_its_deadline_is_reported_and_the_probe_stops_the_check(tmp_path: Path) -> None:
    """A budget too small for the probe's imports: the probe times out, the report says so, one line says why."""
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, SCRIPT, "--device", "cpu", "--tiny", "--budget", "0.2",
                        "--work", str(tmp_path / "work"), "--out", str(out)],
                       capture_output=True, text=True, timeout=300, env=_env())
    report = json.loads((out / "gpu_check.json").read_text())
    assert p.returncode == 2 and report["verdict"] == "probe failed"
    assert report["parts"]["probe"]["status"] == "timeout" and list(report["parts"]) == ["probe"]
    assert p.stdout.strip().splitlines()[-1].startswith("gpu_check: the probe failed: past its deadline")


def test_the_image_rules_hide_what_the_image_lacks_and_stand_in_for_ray() -> None:
    code = ("from tests import gpu_image as g\nhidden = g.hide_missing()\ng.stand_in_for_ray()\n"
            "import ray\nprint(ray.__toolgym_stand_in__)\n"
            "try:\n    ray.get([1])\nexcept RuntimeError as e:\n    print(e)\n"
            "import importlib.util\nprint(sorted(m for m in ('ruff', 'mkdocs') if m in hidden),"
            " importlib.util.find_spec('ruff'))\nimport torch, transformers, peft, trl, gymnasium\nprint('ok')")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=_env(), cwd=ROOT)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stdout.splitlines() == [
        "True", "ray.get: Ray is not installed here (tests/gpu_image.py stands in for its import)",
        "['mkdocs', 'ruff'] None", "ok"]


@pytest.mark.slow
def test_gpu_check_without_cuda_says_so_in_one_line() -> None:
    p = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, timeout=300, env=_env())
    assert p.returncode == 2 and p.stdout.strip().splitlines() == [
        "gpu_check: no CUDA device visible (torch.cuda.is_available() is False); use --device cpu --tiny for the "
        "CPU form"]


def test_the_wheel_pins_print_one_a_line() -> None:
    p = subprocess.run([sys.executable, str(ROOT / "tests" / "gpu_image.py"), "--wheels"], capture_output=True,
                       text=True, timeout=60)
    pins = p.stdout.split()
    assert p.returncode == 0 and "trl==1.16.0" in pins and "gymnasium==1.4.0" in pins
    assert all(x.count("==") == 1 for x in pins) and not any(x.startswith("ray==") for x in pins)
