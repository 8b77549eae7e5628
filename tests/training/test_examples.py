"""Configs are the user's paths: a relative path starts at the current folder, the shipped examples are found
by name from any folder, and an installed (non-editable) toolgym carries them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from toolgym.errors import ConfigError
from toolgym.training.config import load_config
from toolgym.training.examples import FOLDER, example_names, find_config

ROOT = Path(__file__).resolve().parents[2]
_SCRIPT = Path(sys.executable).parent / "toolgym"
CLI = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-c", "from toolgym.cli import main; main()"]


def test_every_example_config_is_shipped_once_as_a_link_to_examples() -> None:
    yamls = sorted(p.name for p in (ROOT / "examples").glob("*.yaml"))
    assert yamls and sorted(p.name for p in FOLDER.iterdir()) == yamls
    for name in yamls:
        link = FOLDER / name
        assert link.is_symlink() and link.resolve() == (ROOT / "examples" / name).resolve(), name
    assert example_names() == [n.removesuffix(".yaml") for n in yamls]


def test_a_config_by_relative_path_or_example_name_from_another_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cfgs").mkdir()
    (tmp_path / "cfgs" / "mine.yaml").write_text("model: {name_or_path: demo}\noutput_dir: runs/mine\nsteps: 3\n")
    cfg = load_config("cfgs/mine.yaml")
    assert (cfg.steps, cfg.output_dir) == (3, "runs/mine")
    for name in ("arith_ctpo", "arith_ctpo.yaml"):
        assert find_config(name) == FOLDER / "arith_ctpo.yaml"
        assert load_config(name).output_dir == "runs/arith_ctpo"
    (tmp_path / "arith_ctpo.yaml").write_text("model: {name_or_path: demo}\nsteps: 7\n")
    assert load_config("arith_ctpo.yaml").steps == 7  # a file of that name here is the user's, not the example


def test_a_missing_config_path_says_where_it_was_looked_for(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as exc:
        load_config("examples/arith_ctpo.yaml")
    assert str(exc.value) == (f"config file not found: examples/arith_ctpo.yaml (a relative path starts at the "
                              f"current folder, {tmp_path}); the shipped example of that name runs by name: "
                              "arith_ctpo")
    with pytest.raises(ConfigError, match=r"^config file not found: /nowhere/x\.yaml$"):
        load_config("/nowhere/x.yaml")
    (tmp_path / "d").mkdir()
    with pytest.raises(ConfigError, match=r"^config d is a folder; give a YAML file or an example name$"):
        load_config("d")


@pytest.mark.slow  # one real training step (about 10 s of CPU)
def test_train_by_relative_path_writes_output_dir_under_the_current_folder(tmp_path: Path) -> None:
    """output_dir in a config in a sub-folder means the current folder, as the user typed it."""
    (tmp_path / "cfgs").mkdir()
    text = (ROOT / "examples" / "arith_ctpo.yaml").read_text().replace("output_dir: runs/arith_ctpo",
                                                                       "output_dir: runs/here")
    (tmp_path / "cfgs" / "run.yaml").write_text(text)
    tiny = ["-s", "steps=1", "-s", "sft.enabled=false", "-s", "eval.every=0", "-s", "eval.tasks=2",
            "-s", "rollout.prompts_per_step=2", "-s", "rollout.group_size=2", "-s", "mini_batches=1",
            "-s", "logging.tensorboard=false", "--json"]
    r = subprocess.run([*CLI, "train", "cfgs/run.yaml", *tiny], cwd=tmp_path, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "runs" / "here" / "metrics.jsonl").is_file()
    assert not (tmp_path / "cfgs" / "runs").exists()


@pytest.mark.slow  # builds a wheel (setuptools, no network)
def test_a_wheel_built_from_the_repository_carries_the_example_configs(tmp_path: Path) -> None:
    src = tmp_path / "src-tree"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "examples", src / "examples", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copytree(ROOT / "src", src / "src", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    env = {**os.environ, "PIP_NO_INDEX": "1"}
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("toolgym-*.whl")
    with zipfile.ZipFile(wheel) as z:
        shipped = {n.removeprefix("toolgym/examples/"): z.read(n) for n in z.namelist()
                   if n.startswith("toolgym/examples/")}
    expected = {p.name: p.read_bytes() for p in (ROOT / "examples").glob("*.yaml")}
    assert shipped == expected
