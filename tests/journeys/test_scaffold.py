"""Journey: `toolgym envs new my-env` in an empty folder, installed into a fresh virtual environment (the
helper of the plug-in journey), then checked, tested by its own tests and trained for one step, as generated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.journeys.test_plugin_env import _fresh_venv
from tests.journeys.user import User

ENV_ID = "my-env/MyEnv-v0"  # the id rule: NAME/<NAME in CamelCase>-v0


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_a_new_package_checks_tests_and_trains_as_generated(tmp_path: Path) -> None:
    user = User(tmp_path / "home")
    py = str(_fresh_venv(tmp_path / "venv"))
    cli = (py, "-m", "toolgym")

    made = user.run(*cli, "envs", "new", "my-env")
    assert f"wrote ./my-env/ with environment {ENV_ID}" in made.stdout, made.stdout
    install = next(ln.strip() for ln in made.stdout.splitlines() if "pip install" in ln)
    assert install == "pip install -e ./my-env", made.stdout  # a path pip takes as one, not a package name
    assert sorted(str(p.relative_to(user.home)) for p in user.home.rglob("*") if p.is_file()) == [
        "my-env/README.md", "my-env/pyproject.toml", "my-env/src/my_env/__init__.py", "my-env/tests/test_env.py",
        "my-env/train.yaml"]

    user.run(py, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", "./my-env")
    assert "(plugin)" in next(ln for ln in user.run(*cli, "envs", "list").stdout.splitlines() if ENV_ID in ln)
    checked = user.run(*cli, "envs", "check", ENV_ID).stdout
    assert f"{ENV_ID}: 17/17 checks passed" in checked, checked

    tested = user.run(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "my-env/tests")
    assert "3 passed" in tested.stdout, tested.stdout

    user.run(*cli, "train", "my-env/train.yaml", "--no-progress")
    rows = [json.loads(line) for line in (user.home / "runs/my-env/metrics.jsonl").read_text().splitlines()]
    step = [r for r in rows if r.get("kind") == "train" and r.get("step") == 1]
    assert step and 0.0 <= step[0]["reward_mean"] <= 1.1, rows  # the rubric's range: correct + 0.1 for the form
    assert (user.home / "runs/my-env/checkpoints/step-000001/hf/model.safetensors").is_file()
