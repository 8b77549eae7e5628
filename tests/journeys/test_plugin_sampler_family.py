"""Journey: a sampler and a task family shipped in a package without entry points
(tests/fixtures/plugin_sums), installed into a fresh virtual environment, then trained by `toolgym train` from a
YAML file that names both as ``package.module:Name`` (the algorithm's journey is test_plugin_algorithm.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.journeys.test_plugin_env import _fresh_venv
from tests.journeys.user import ROOT, User

PACKAGE = ROOT / "tests" / "fixtures" / "plugin_sums"
SAMPLER = "toolgym_sums_plugin.sampler:COUNTING"
FAMILY = "toolgym_sums_plugin.family:FAMILY"
RECORDS = [{"id": f"s{i}", "a": 3 * i + 1, "b": 2 * i} for i in range(8)]

CONFIG = f"""\
algorithm: grpo
seed: 0
output_dir: runs/sums
steps: 1
mini_batches: 1
model:
  name_or_path: demo
  model_kwargs: {{layers: 1, hidden: 32, heads: 2, intermediate: 64, max_positions: 2048, vocab_size: 300}}
rollout:
  env: toolgym/MathTIR-v0
  env_kwargs: {{dataset: "{FAMILY}:sums.jsonl", max_turns: 1}}
  sampler: {SAMPLER}
  sampler_kwargs: {{log: sampler.log}}
  group_size: 2
  prompts_per_step: 2
  max_turns: 1
  max_new_tokens: 8
  max_response_tokens: 24
  sandbox: null
sft: {{enabled: false}}
eval: {{every: 0, tasks: 2, at_start: false}}
logging: {{progress: false, plot: false, tensorboard: false, save_rollouts: true}}
"""


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_an_installed_sampler_and_task_family_are_trained_from_yaml_by_reference(tmp_path: Path) -> None:
    user = User(tmp_path / "home")
    py = str(_fresh_venv(tmp_path / "venv"))
    cli = (py, "-m", "toolgym")
    user.write("sums.jsonl", "".join(json.dumps(r) + "\n" for r in RECORDS))
    user.write("sums.yaml", CONFIG)
    user.write("family_only.yaml", CONFIG.replace(f"sampler: {SAMPLER}", "sampler: hf").replace(
        "  sampler_kwargs: {log: sampler.log}\n", ""))

    # before the install: one line naming the plug-in that is missing, exit 2, before any run folder is made
    for config, kind, ref in (("sums.yaml", "sampler", SAMPLER), ("family_only.yaml", "task family", FAMILY)):
        before = user.run(*cli, "train", config, check=False)
        assert before.returncode == 2, before.stderr
        assert before.stderr.strip().splitlines() == [
            f"error: the plug-in {kind} {ref!r} failed to load: ModuleNotFoundError: No module named "
            "'toolgym_sums_plugin' (is its package installed in this environment?)"], before.stderr
    assert not (user.home / "runs").exists() and not (user.home / "sampler.log").exists()

    user.run(py, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", str(PACKAGE))
    user.run(*cli, "train", "sums.yaml", "--no-progress")

    # the family's tasks were played: each trajectory is a record of sums.jsonl asked as the family asks it
    questions = {f"sums-{r['id']}": f"What is {r['a']} + {r['b']}?" for r in RECORDS}
    rows = [json.loads(line) for line in (user.home / "runs/sums/rollouts/step-0001.jsonl").read_text().splitlines()]
    assert len(rows) == 4, rows  # 2 prompts x a group of 2
    for row in rows:
        asked = [t["content"] for t in row["turns"] if t["role"] == "user"]
        assert asked == [questions[row["task_id"]]], (row["task_id"], asked)
        assert row["metadata"]["sampler"] == "counting"  # the plug-in sampler's own name
    # ... by the plug-in sampler, with the sampler_kwargs the config gave it
    calls = (user.home / "sampler.log").read_text().splitlines()
    assert calls and all(c.startswith("generate ") for c in calls), calls
    assert sum(int(c.split()[1]) * int(c.split()[-1]) for c in calls) >= 4, calls
    assert (user.home / "runs/sums/checkpoints/step-000001/hf/model.safetensors").is_file()
    saved = (user.home / "runs/sums/config.yaml").read_text()
    assert f"sampler: {SAMPLER}" in saved and f"{FAMILY}:sums.jsonl" in saved, saved

    # the environment the tests run in never saw the plug-in
    here = user.run("python", "-m", "toolgym", "train", "sums.yaml", check=False)
    assert here.returncode == 2 and "toolgym_sums_plugin" in here.stderr, here.stderr
