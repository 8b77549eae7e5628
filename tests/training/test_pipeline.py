"""The asynchronous pipeline (``rollout.max_staleness``, ``rollout.workers``) through the real trainer and CLI:
each step's groups come from the policy version the schedule says, the runs repeat exactly, a resume after
``kill -9`` continues with the same losses, and the trainer's process never scores model text (a user's
script, without a ``__main__`` guard, training a user's environment)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from toolgym.agents.trajectory import Trajectory
from toolgym.training.outputs.logging import read_metrics
from toolgym.training.pipeline import AheadRollouts

from .trainer_util import kill_at_checkpoint, tiny_config

TOOLGYM = str(Path(sys.executable).parent / "toolgym")


def _config(tmp: Path, name: str, *, staleness: int, workers: int = 0, steps: int = 4, **over) -> Path:
    cfg = tiny_config(tmp / name, steps=steps, sft={"enabled": True, "demos": 48, "epochs": 15, "lr": 5e-3,
                                                     "batch_size": 16, "max_seq_len": 64, "tool_fraction": 0.0,
                                                     "direct_correct": 0.5})
    cfg["rollout"]["env_kwargs"].update(ops="+", format_weight=1.0)
    cfg["rollout"].update(max_staleness=staleness, workers=workers, sandbox=None)
    cfg["checkpoint"] = {"every": 2, "keep_last": 3}
    for key, value in over.items():
        cfg[key] = value
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _run(path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([TOOLGYM, "train", str(path), "--no-progress", *extra], capture_output=True, text=True,
                          timeout=900, cwd=path.parent)


@pytest.mark.slow
def test_staleness_one_follows_its_schedule_repeats_and_resumes_exactly_after_kill9(tmp_path):
    """One run of 5 steps at max_staleness 1, and one killed with SIGKILL after its step-2 checkpoint, then
    resumed: step s is sampled by version max(0, s - 1); the killed run's first steps equal the full run's (the
    schedule, not timing, decides which weights sample which step); the resumed steps 3-5 equal them too
    (step 3 comes from the batch the checkpoint kept, 4 and 5 are sampled after the resume)."""
    full = _run(_config(tmp_path, "full", staleness=1, steps=5))
    assert full.returncode == 0, full.stderr[-3000:]
    a = {r["step"]: r for r in read_metrics(tmp_path / "full", "train")}
    assert sorted(a) == [1, 2, 3, 4, 5]
    assert any(a[s]["adv_zero_groups"] < 2 for s in a), "rewards never varied: the comparison would be vacuous"
    assert a[1]["staleness_0"] == 2 and a[1]["staleness_1"] == 0  # steps 1 and 2 are sampled by version 0
    for s in (2, 3, 4, 5):
        assert a[s]["staleness_1"] == 2 and a[s]["staleness_0"] == 0 and a[s]["groups_dropped_stale"] == 0, a[s]
    assert all(math.isfinite(a[s]["trainer_idle_s"]) and a[s]["sampler_idle_s"] >= 0 for s in a)

    cfg = _config(tmp_path, "killed", staleness=1, steps=5)
    out = tmp_path / "killed"
    kill_at_checkpoint([TOOLGYM, "train", str(cfg), "--no-progress"], out, 2, cwd=tmp_path)  # the trainer only:
    # its workers must go with it
    before = {r["step"]: r for r in read_metrics(out, "train")}
    # The same tokens (rewards and lengths equal exactly). The loss agrees to 1e-6, not to the bit: at K=1 the
    # mismatch weight reads the worker's own log-probs, which its continuous batching moves by ~1e-6 from run
    # to run; an on-policy loss is a sum of advantages times such weights, ~1e-5 in all, so runs differ by up to
    # 2e-7 (seen: 9.79e-6 .. 9.97e-6). A wrong batch or lost state moves it by orders of magnitude more.
    tol = {"rel": 1e-5, "abs": 1e-6}
    for s in (1, 2):
        assert before[s]["reward_mean"] == a[s]["reward_mean"] and before[s]["response_tokens"] == a[s]["response_tokens"]
        assert before[s]["loss"] == pytest.approx(a[s]["loss"], **tol), (s, before[s]["loss"], a[s]["loss"])
    resumed = _run(cfg, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stdout + resumed.stderr
    b = {r["step"]: r for r in read_metrics(out, "train")}
    assert sorted(b) == [1, 2, 3, 4, 5]
    for s in (3, 4, 5):
        assert a[s]["loss"] == pytest.approx(b[s]["loss"], **tol), (s, a[s]["loss"], b[s]["loss"])
        assert a[s]["reward_mean"] == b[s]["reward_mean"] and a[s]["response_tokens"] == b[s]["response_tokens"]
        assert b[s]["staleness_1"] == 2


def user_env() -> str:
    """The README's environment (examples/register_env.py) as a user's module, its reward noting its pid."""
    text = (Path(__file__).parents[2] / "examples" / "register_env.py").read_text()
    text = text.split('if __name__ == "__main__":')[0].replace('"myorg/Reverse-v0"', '"pipe/Reverse-v0"')
    note = ('    import os\n    with open(os.environ["PIPE_REWARD_PIDS"], "a") as f:  # which process scores model text\n'
            '        f.write(f"{os.getpid()}\\n")\n')
    marker = "def correct(answer: str | None, task: Task) -> float:\n"
    assert marker in text and '"pipe/Reverse-v0"' in text, "examples/register_env.py changed shape"
    return text.replace(marker, marker + note)


@pytest.mark.slow
def test_with_workers_the_trainer_process_never_runs_a_reward_function(tmp_path):
    (tmp_path / "pipe_user_env.py").write_text(user_env())
    probe = tmp_path / "probe.py"
    probe.write_text(textwrap.dedent(f'''
        import os, yaml
        from toolgym.training.config import load_config
        from toolgym.training.trainer import Trainer
        cfg = yaml.safe_load(open({str(tmp_path / "run.yaml")!r}))
        tr = Trainer(load_config(cfg), console=False)
        tr.fit()
        print("TRAINER", os.getpid())
    '''))
    cfg = tiny_config(tmp_path / "run", steps=2, sft={"enabled": False})
    cfg["rollout"].update(env="pipe_user_env:pipe/Reverse-v0", env_kwargs={}, sandbox=None, max_staleness=1,
                          workers=1)
    cfg["checkpoint"] = {"every": 0}
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(cfg))
    p = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                       env={**os.environ, "PIPE_REWARD_PIDS": str(tmp_path / "pids"),
                            "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})
    assert p.returncode == 0, p.stderr[-3000:]
    trainer = int(p.stdout.strip().splitlines()[-1].split()[1])
    scorers = {int(x) for x in (tmp_path / "pids").read_text().split()}
    assert scorers and trainer not in scorers  # every reward (training and the final evaluation) ran in a worker


class _Workers:
    """Hands the pipeline a prepared batch per step (a worker that sampled with weights it should not have
    held is a fault this schedule cannot produce for real: named here as a stand-in for it)."""

    def __init__(self, version_of_step):
        self.version_of_step = version_of_step
        self.asked: list[tuple[int, int]] = []

    def sample_step(self, step, version, weights):
        self.asked.append((step, version))
        v = self.version_of_step(step, version)
        return [[Trajectory(task_id=f"t{step}-{g}", group_id=f"g{g}", prompt_ids=[1], response_ids=[2, 3],
                            loss_mask=[1, 1], behavior_logprobs=[-0.1, -0.2], token_versions=[v, v])]
                for g in range(2)]


def test_the_schedule_asks_version_step_minus_k_and_drops_groups_older_than_k():
    honest = _Workers(lambda step, version: version)
    ahead = AheadRollouts(honest, lag=2, first_step=0, last_step=5)
    try:
        for v in range(5):
            ahead.publish(v, {})
            groups, m = ahead.take(v)
            assert len(groups) == 2 and m["groups_dropped_stale"] == 0
            assert m[f"staleness_{min(v, 2)}"] == 2
    finally:
        ahead.close()
    assert honest.asked == [(0, 0), (1, 0), (2, 0), (3, 1), (4, 2)]

    stale = _Workers(lambda step, version: version - 1)  # one version older than the schedule allows
    ahead = AheadRollouts(stale, lag=1, first_step=0, last_step=3)
    try:
        ahead.publish(0, {})
        kept, m = ahead.take(0)  # age 1: within the bound
        assert len(kept) == 2 and m["groups_dropped_stale"] == 0 and m["staleness_1"] == 2
        kept, m = ahead.take(1)  # sampled for version 0 with version -1's weights: age 2 > 1
        assert kept == [] and m["groups_dropped_stale"] == 2
        ahead.publish(1, {})
        kept, m = ahead.take(2)
        assert kept == [] and m["groups_dropped_stale"] == 2
    finally:
        ahead.close()
