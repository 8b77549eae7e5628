"""Journey (b): an environment shipped as a package with an entry point (examples/plugin_env), installed into a
fresh virtual environment (not the one the tests run in), then listed, checked and trained by its id alone."""

from __future__ import annotations

import json
import site
import subprocess
import sys
from pathlib import Path

import pytest

from tests.journeys.user import ROOT, User

CONFIG = """\
algorithm: grpo
seed: 0
output_dir: runs/plugin
steps: 1
mini_batches: 1
model:
  name_or_path: demo
  model_kwargs: {layers: 1, hidden: 32, heads: 2, intermediate: 64, max_positions: 192, vocab_size: 300}
rollout:
  env: example/Reverse-v0
  group_size: 2
  prompts_per_step: 2
  max_turns: 2
  max_new_tokens: 8
  max_response_tokens: 24
eval:
  every: 0
  tasks: 2
"""


def _fresh_venv(where: Path) -> Path:
    """A new virtual environment that sees the packages of this one (toolgym, torch: too big to install per
    test) after its own, and nothing else of it: a plug-in installed there is unknown here."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    py = where / "bin" / "python"
    own = subprocess.run([str(py), "-c", "import site; print(site.getsitepackages()[0])"], check=True,
                         capture_output=True, text=True).stdout.strip()
    Path(own, "zz_toolgym_deps.pth").write_text(f"import site; site.addsitedir({site.getsitepackages()[0]!r})\n")
    return py


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_plugin_package_installed_in_a_fresh_venv_is_trained_by_id(tmp_path: Path) -> None:
    user = User(tmp_path / "home")
    py = str(_fresh_venv(tmp_path / "venv"))
    cli = (py, "-m", "toolgym")

    # the id is not known before the install, in either environment
    before = user.run(*cli, "envs", "check", "example/Reverse-v0", check=False)
    assert before.returncode == 2 and "unknown environment 'example/Reverse-v0'" in before.stderr, before.stderr

    user.run(py, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
             str(ROOT / "examples" / "plugin_env"))
    listed = user.run(*cli, "envs", "list").stdout
    assert "example/Reverse-v0" in listed and "example/ReverseHard-v0" in listed and "(plugin)" in listed
    checked = user.run(*cli, "envs", "check", "example/Reverse-v0").stdout
    assert "ok   builds for training rollouts (partition='train', sandbox=...)" in checked
    assert "example/Reverse-v0: 17/17 checks passed" in checked

    user.write("plugin.yaml", CONFIG)
    user.run(*cli, "train", "plugin.yaml", "--no-progress")
    rows = [json.loads(line) for line in (user.home / "runs/plugin/metrics.jsonl").read_text().splitlines()]
    step = [r for r in rows if r.get("kind") == "train" and r.get("step") == 1]
    assert step and 0.0 <= step[0]["reward_mean"] <= 1.0, rows
    assert (user.home / "runs/plugin/checkpoints/step-000001/hf/model.safetensors").is_file()

    # the environment the tests run in never saw the plug-in
    here = user.run("toolgym", "envs", "list").stdout
    assert "example/Reverse-v0" not in here
