"""A weight push that fails ends the run with its error, also the push after the last step (which no batch is
taken after). The fault is real: the user's reward function kills the ``vllm serve`` process group (SIGKILL)
while the last step's episodes are scored, so the pushes after it meet a server that is gone. Under CI=true
this runs and fails when a part is missing; elsewhere it skips."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.requirements import need

pytestmark = [pytest.mark.vllm, pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
VENV_PY = ROOT / ".venv-vllm" / "bin" / "python"

#: Arith whose reward kills the server at its third call: step 1 scores calls 1-2 (one group of two), so the
#: third is the last step's first episode. Every later push finds no server.
KILLING_ENV = """
import fcntl
import os
import signal

import toolgym
from toolgym.envs import Rubric
from toolgym.envs.builtin.arith import ArithEnv


def kill_the_server_at_the_last_step(completion: str) -> float:
    path = os.environ["H_REWARD_CALLS"]
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write("x")
        f.flush()
        calls = os.path.getsize(path)
    if calls >= 3:
        try:
            os.killpg(int(os.environ["H_SERVER_PGID"]), signal.SIGKILL)
        except ProcessLookupError:
            pass
    return 0.5


class KillingArith(ArithEnv):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.rubric = Rubric([kill_the_server_at_the_last_step])


toolgym.register("h35/KillingArith-v0", entry_point=KillingArith)
"""


@pytest.fixture
def server(smollm2_dir):
    need(VENV_PY.exists(), f"{VENV_PY} is missing: run scripts/setup_vllm.sh")
    from toolgym.agents.server_sampler import VLLMServerSampler

    sampler = VLLMServerSampler(str(smollm2_dir), servers=1, python=str(VENV_PY), dtype="float32",
                                enforce_eager=True, max_model_len=1024, max_num_seqs=8, max_num_batched_tokens=1024)
    try:
        yield sampler
    finally:
        sampler.close()


def test_a_push_that_fails_after_the_last_step_ends_the_run_with_its_error(server, tmp_path):
    """Two steps at max_staleness 1 with pushes as each update ends: the push after step 2 (and maybe the one
    after step 1) meets a killed server. The run must exit non-zero with one line naming the push and the
    server, not finish with exit 0 on weights the servers never took."""
    (tmp_path / "h35_killing_env.py").write_text(KILLING_ENV)
    cfg = yaml.safe_load((ROOT / "examples" / "smollm2_arith.yaml").read_text())
    cfg.update(steps=2, output_dir="run", mini_batches=1)
    url = server.urls[0]
    cfg["rollout"].update(env="h35_killing_env:h35/KillingArith-v0", sampler="vllm_server", servers=[url],
                          max_staleness=1, push_on="update", prompts_per_step=1, group_size=2, max_turns=1,
                          max_new_tokens=16, max_response_tokens=64, sandbox="local", sandbox_pool=1)
    cfg["eval"] = {"every": 0, "at_start": False, "tasks": 2}
    cfg["logging"] = {"tensorboard": False, "plot": False, "progress": False}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "H_SERVER_PGID": str(server.processes[0].pid),
           "H_REWARD_CALLS": str(tmp_path / "reward_calls"),
           "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    toolgym = str(Path(sys.executable).parent / "toolgym")
    res = subprocess.run([toolgym, "train", "cfg.yaml", "--no-progress"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=800, env=env)
    calls = tmp_path / "reward_calls"
    assert calls.exists() and calls.read_text().count("x") >= 3, res.stderr[-3000:]  # the server was killed
    assert server.processes[0].proc.poll() is not None
    assert res.returncode != 0, res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    print(last)
    assert last.startswith("error: ") and f"weight push to {url}/" in last, res.stderr[-3000:]
