"""`toolgym envs new NAME` as a user runs it (the real console script): what it writes, and what it refuses."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.test_cli import CLI


def _new(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "envs", "new", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("name", "env_id", "target"), [
    ("my-env", "my-env/MyEnv-v0", "my_env:MyEnv"),
    ("counter", "counter/Counter-v0", "counter:CounterEnv"),
    ("word-count2", "word-count2/WordCount2-v0", "word_count2:WordCount2Env"),
])
def test_the_id_and_entry_point_follow_the_name(tmp_path: Path, name: str, env_id: str, target: str) -> None:
    r = _new(name, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    project = (tmp_path / name / "pyproject.toml").read_text()  # (tomllib is 3.11+; the project supports 3.10)
    assert f'\nname = "{name}"\n' in project
    assert f'[project.entry-points."toolgym.envs"]\n"{env_id}" = "{target}"\n' in project
    module, cls = target.split(":")
    source = (tmp_path / name / "src" / module / "__init__.py").read_text()
    compile(source, "__init__.py", "exec")
    assert f"class {cls}(ToolEnv):" in source and "@tool" in source and "Rubric(" in source
    assert f'ENV_ID = "{env_id}"' in (tmp_path / name / "tests" / "test_env.py").read_text()
    train = (tmp_path / name / "train.yaml").read_text()
    assert f"env: {env_id}\n" in train and "steps: 1\n" in train and "enabled: false" in train
    assert f"toolgym envs check {env_id}" in (tmp_path / name / "README.md").read_text()


def test_an_existing_folder_is_refused_in_one_line_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "my-env").mkdir()
    (tmp_path / "my-env" / "notes.txt").write_text("mine")
    r = _new("my-env", cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == ["error: my-env already exists; pick another NAME or --dir (nothing was written)"]
    assert [p.name for p in (tmp_path / "my-env").iterdir()] == ["notes.txt"]


@pytest.mark.parametrize(("name", "why"), [
    ("My-Env", "must be lowercase letters and digits"),
    ("my_env", "must be lowercase letters and digits"),
    ("my--env", "must be lowercase letters and digits"),
    ("-rf", "must be lowercase letters and digits"),
    ("../escape", "must be lowercase letters and digits"),
    ("2fast", "must be lowercase letters and digits"),
    ("x" * 41, "at most 40 characters"),
    ("class", "is a Python keyword"),
    ("json", "hides Python's or toolgym's own"),
    ("toolgym", "hides Python's or toolgym's own"),
])
def test_a_bad_name_is_one_line_exit_2_and_writes_nothing(tmp_path: Path, name: str, why: str) -> None:
    r = _new("--", name, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: NAME {name!r}") and why in lines[0], lines
    assert list(tmp_path.iterdir()) == []


def test_dir_puts_the_package_in_another_folder(tmp_path: Path) -> None:
    r = _new("my-env", "--dir", "pkgs", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "pkgs" / "my-env" / "pyproject.toml").is_file()
    assert "pip install -e ./pkgs/my-env\n" in r.stdout
