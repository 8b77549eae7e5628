"""`toolgym train` stopped by SIGINT or SIGTERM, as a user (or a scheduler) stops it: from a fresh folder, through
the CLI, with a real signal once the first step's progress line is out. It keeps a checkpoint at the last finished
step, prints one line with the exact resume command, exits 128 + the signal; that command continues from the step
and the run ends by printing the viewer command for its saved rollouts."""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest
import yaml

from tests.stopping import resume_args, run, signal_when, stop_line
from tests.training.trainer_util import tiny_config
from toolgym.training.outputs.logging import read_metrics

STEPS = 12


def _config(cwd: Path) -> Path:
    cfg = tiny_config(Path("run"), steps=STEPS, mini_batches=1, checkpoint__every=0, rollout__sandbox="local",
                      logging={"progress": True, "plot": False, "tensorboard": False, "save_rollouts": True})
    path = cwd / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_keeps_the_last_step_and_the_printed_command_resumes_it(tmp_path: Path, signum: int) -> None:
    _config(tmp_path)
    rc, lines, sent = signal_when(["train", "tiny.yaml", "--seed", "3"], tmp_path,
                                  lambda x: x.startswith(f"train 1/{STEPS} "), signum)
    assert sent, "\n".join(lines[-30:])
    assert rc == 128 + signum, "\n".join(lines[-30:])
    # what it is doing shows before the model exists, and SFT has its own bar before the RL steps' one
    first = [next(i for i, x in enumerate(lines) if x.startswith(p))
             for p in ("SFT warm start: preparing", "loading the policy: demo", "sft 1/", f"train 1/{STEPS} ")]
    assert first == sorted(first), lines
    line = stop_line(lines)
    m = re.fullmatch(rf"stopped at step (\d+) of {STEPS} \({signal.Signals(signum).name}; checkpoint (\S+)\); "
                     r"resume: toolgym train tiny.yaml --seed 3 --resume", line)
    assert m, line
    step = int(m.group(1))
    assert 1 <= step < STEPS
    ckpt = tmp_path / m.group(2)
    assert ckpt.name == f"step-{step:06d}" and (ckpt / "hf").is_dir()
    assert json.loads((ckpt / "meta.json").read_text())["step"] == step
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("step-*")) == [ckpt.name]
    assert [r["step"] for r in read_metrics(tmp_path / "run", "train")] == list(range(1, step + 1))

    res = run(resume_args(line), tmp_path)
    assert res.returncode == 0, res.stderr[-3000:] + res.stdout[-3000:]
    out = res.stdout.splitlines()
    assert f"resumed from run/checkpoints/step-{step:06d} at step {step}" in out
    bars = [x for x in out if x.startswith("train ")]
    assert bars[0] == f"train {step}/{STEPS} steps starting"  # the bar starts at the resumed step
    assert bars[1].startswith(f"train {step + 1}/{STEPS} steps") and bars[-1].startswith(f"train {STEPS}/{STEPS} ")
    assert [r["step"] for r in read_metrics(tmp_path / "run", "train")] == list(range(1, STEPS + 1))
    assert out[-1] == f"rollouts: toolgym rollouts view run/rollouts/step-{STEPS:04d}.jsonl"
    page = run(["rollouts", "view", f"run/rollouts/step-{STEPS:04d}.jsonl", "--out", "pages"], tmp_path)
    assert page.returncode == 0, page.stderr
    assert (tmp_path / "pages" / f"step-{STEPS:04d}.html").is_file()
    assert not any("Writing model shards" in x for x in lines + out + res.stderr.splitlines())
