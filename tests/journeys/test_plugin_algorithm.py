"""Journey: an algorithm shipped as a package (tests/fixtures/plugin_algorithm) with a ``toolgym.algorithms``
entry point, installed into a fresh virtual environment, then trained by `toolgym train` from a YAML file that
names it: by its entry-point name, and as ``package.module:NAME``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.journeys.test_plugin_env import _fresh_venv
from tests.journeys.user import ROOT, User

PACKAGE = ROOT / "tests" / "fixtures" / "plugin_algorithm"
REFERENCE = "toolgym_positive_algo:POSITIVE_GRPO"

CONFIG = """\
algorithm: {algorithm}
options: {{min_advantage: 0.0}}
seed: 0
output_dir: runs/{run}
steps: 1
mini_batches: 1
model:
  name_or_path: demo
  model_kwargs: {{layers: 1, hidden: 32, heads: 2, intermediate: 64, max_positions: 128, vocab_size: 300}}
rollout:
  env: toolgym/Arith-v0
  env_kwargs: {{min_digits: 1, max_digits: 1, ops: "+", max_turns: 1, system_prompt: null}}
  group_size: 2
  prompts_per_step: 2
  max_turns: 1
  max_new_tokens: 8
  max_response_tokens: 24
  sandbox: null
sft: {{enabled: false}}
eval: {{every: 0, tasks: 2, at_start: false}}
logging: {{progress: false, plot: false, tensorboard: false}}
"""


def _step(user: User, run: str) -> dict:
    rows = [json.loads(line) for line in (user.home / f"runs/{run}/metrics.jsonl").read_text().splitlines()]
    step = [r for r in rows if r.get("kind") == "train" and r.get("step") == 1]
    assert step, rows
    return step[0]


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_an_installed_algorithm_is_trained_from_yaml_by_name_and_by_reference(tmp_path: Path) -> None:
    user = User(tmp_path / "home")
    py = str(_fresh_venv(tmp_path / "venv"))
    cli = (py, "-m", "toolgym")
    user.write("by_name.yaml", CONFIG.format(algorithm="positive_grpo", run="by_name"))
    user.write("by_ref.yaml", CONFIG.format(algorithm=REFERENCE, run="by_ref"))

    # before the install: one line each, exit 2, no run folder
    before = user.run(*cli, "train", "by_name.yaml", check=False)
    assert before.returncode == 2 and "unknown algorithm 'positive_grpo'" in before.stderr, before.stderr
    before = user.run(*cli, "train", "by_ref.yaml", check=False)
    assert before.returncode == 2, before.stderr
    assert before.stderr.strip().splitlines() == [
        f"error: the plug-in algorithm {REFERENCE!r} failed to load: ModuleNotFoundError: No module named "
        "'toolgym_positive_algo' (is its package installed in this environment?)"], before.stderr
    assert not (user.home / "runs").exists()

    user.run(py, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", str(PACKAGE))

    for run in ("by_name", "by_ref"):
        user.run(*cli, "train", f"{run}.yaml", "--no-progress")
        step = _step(user, run)
        # the plug-in's own metric: its prepare() ran; the rows it held back are among the 4 rollouts
        assert 0 <= step["rows_below_min_advantage"] <= 4, step
        assert (user.home / f"runs/{run}/checkpoints/step-000001/hf/model.safetensors").is_file()
        saved = (user.home / f"runs/{run}/config.yaml").read_text()
        assert "ratio: token" in saved and "min_advantage: 0.0" in saved, saved  # its defaults and options

    # the environment the tests run in never saw the plug-in
    here = user.run("python", "-m", "toolgym", "train", "by_name.yaml", check=False)
    assert here.returncode == 2 and "unknown algorithm 'positive_grpo'" in here.stderr, here.stderr
