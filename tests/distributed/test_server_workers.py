"""Episodes in rollout workers that sample from vLLM servers, through ``toolgym train`` from a fresh folder with
a user's YAML and a user's environment: worker processes on one machine (a) and Ray actors on a local cluster
(b). The user's reward function notes its pid: no reward ever runs in the trainer's process. Every token's
version is the servers' own tag and never older than the schedule; the servers keep their pid across pushes.
Real parts: the CPU vLLM build in .venv-vllm, SmolLM2-135M, a loopback Ray cluster. Under CI=true these run
and fail when a part is missing; elsewhere they skip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.requirements import need
from tests.training.test_pipeline import user_env

pytestmark = [pytest.mark.vllm, pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[2]
VENV_PY = ROOT / ".venv-vllm" / "bin" / "python"
TOOLGYM = str(Path(sys.executable).parent / "toolgym")


@pytest.fixture()
def smollm2() -> Path:
    from toolgym.assets import asset_path

    need(VENV_PY.exists(), f"{VENV_PY} is missing: run scripts/setup_vllm.sh")
    try:
        return Path(asset_path("smollm2-135m-instruct"))
    except Exception as exc:  # noqa: BLE001 - the asset's own message says how to fetch it
        need(False, f"the smollm2-135m-instruct asset is missing ({exc}): run `toolgym assets fetch "
                    "smollm2-135m-instruct`")
        raise


def _user_run(tmp_path: Path, steps: int, **rollout) -> Path:
    """The SmolLM2 example trained on a user's environment (its reward notes its pid) from ``tmp_path``."""
    text = user_env()
    note = 'f.write(f"{os.getpid()}\\n")'
    assert note in text, "tests/training/test_pipeline.py's user_env changed shape"
    # its pid and its parent's: a reward function may run in a scorer process that an episode's process started
    (tmp_path / "pipe_user_env.py").write_text(text.replace(note, 'f.write(f"{os.getpid()} {os.getppid()}\\n")'))
    cfg = yaml.safe_load((ROOT / "examples" / "smollm2_arith.yaml").read_text())
    cfg.update(steps=steps, output_dir="run", mini_batches=1)
    cfg["rollout"].update(env="pipe_user_env:pipe/Reverse-v0", env_kwargs={}, prompts_per_step=2, group_size=2,
                          max_turns=2, max_new_tokens=32, max_response_tokens=256, sandbox=None, **rollout)
    cfg["rollout"].pop("sandbox_pool", None)
    cfg["eval"] = {"every": 0, "at_start": False, "tasks": 2}
    cfg["logging"] = {"tensorboard": False, "plot": False, "progress": False, "save_rollouts": True}
    return _write(tmp_path, cfg)


def _scorers(tmp_path: Path) -> set[tuple[int, int]]:
    """(pid, parent pid) of every process a reward ran in."""
    return {(int(a), int(b)) for a, b in (ln.split() for ln in (tmp_path / "pids").read_text().splitlines())}


def _write(tmp_path: Path, cfg: dict) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _train(tmp_path: Path, *, watch=None) -> tuple[subprocess.CompletedProcess, int]:
    """``toolgym train run.yaml`` in ``tmp_path``; the trainer's pid. ``watch(pid)`` runs beside it."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PIPE_REWARD_PIDS": str(tmp_path / "pids"),
           "RAY_memory_monitor_refresh_ms": "0",
           "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([TOOLGYM, "train", "run.yaml", "--no-progress"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = threading.Thread(target=watch, args=(proc.pid,), daemon=True) if watch else None
    if seen is not None:
        seen.start()
    out, err = proc.communicate(timeout=1700)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), proc.pid


def _check_versions(run: Path, steps: int, lag: int, *, exact: bool = False) -> list[dict]:
    """Each step's groups: none dropped, every token tagged by its server with a version the schedule allows
    (step s is sampled with version max(0, s - lag) or newer, never newer than s; ``exact``, pushes on the
    schedule: exactly max(0, s - lag))."""
    train = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in train if r.get("kind") == "train"]
    assert [r["step"] for r in train] == list(range(1, steps + 1))
    for step in range(steps):
        trajs = [json.loads(x) for x in (run / "rollouts" / f"step-{step + 1:04d}.jsonl").read_text().splitlines()]
        assert len(trajs) == 4
        for t in trajs:
            v = t["token_versions"]
            assert len(v) == len(t["response_ids"]) > 0 and v == sorted(v), t["error"]
            assert max(0, step - lag) <= v[0] and v[-1] <= step, (step, v)
            assert not exact or v == [max(0, step - lag)] * len(v), (step, v)
            assert t["metadata"]["worker"] in (0, 1)  # run by a rollout worker
    return train


def test_worker_processes_run_every_episode_and_sample_from_the_server(smollm2, tmp_path):
    """(a) rollout.workers: 2 on one server (started here, given by URL), max_staleness 1, three steps."""
    from toolgym.agents.server_sampler import VLLMServerSampler

    server = VLLMServerSampler(str(smollm2), servers=1, python=str(VENV_PY), dtype="float32", enforce_eager=True,
                               max_model_len=1024, max_num_seqs=8, max_num_batched_tokens=1024)
    try:
        pid = server.processes[0].pid
        _user_run(tmp_path, 3, sampler="vllm_server", servers=[server.urls[0]], workers=2, max_staleness=1)
        t0 = time.monotonic()
        res, trainer = _train(tmp_path)
        print(f"toolgym train, 2 workers on 1 server, K=1, 3 steps: {time.monotonic() - t0:.0f} s")
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
        assert "rollout worker process(es) that sample from 1 server(s)" in res.stdout + res.stderr
        # pushes on the schedule: steps 1 and 2 on version 0, step 3 on version 1, which the workers' path had
        # to load into the server before sampling it
        train = _check_versions(tmp_path / "run", 3, lag=1, exact=True)
        for r in train:
            assert r["groups_dropped_stale"] == 0 and r["staleness_0"] + r["staleness_1"] == 2, r
        scorers = _scorers(tmp_path)
        # every reward ran in a worker or a scorer process of one (the final evaluation's too), none in the
        # trainer's process or a child of it
        assert scorers and all(trainer not in (pid, parent) for pid, parent in scorers), (trainer, scorers)
        # the weights reached the running server in place: same process, labelled with the last version
        assert server.processes[0].pid == pid and server.processes[0].proc.poll() is None
        assert server.weight_version(0) == "3"
    finally:
        server.close()


def _proc_stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) of a live process (None: gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), int(fields[19])


def test_ray_server_actors_take_the_weights_and_ray_workers_run_every_episode(smollm2, tmp_path):
    """(b) distributed: ray on a local cluster, one server actor, two Ray rollout workers, three steps sampled one
    step ahead of the update (pushes on the schedule, through the actor)."""
    _user_run(tmp_path, 3, sampler="vllm_server", servers=1, max_staleness=1,
              sampler_kwargs={"python": str(VENV_PY), "max_model_len": 1024, "max_num_seqs": 8,
                              "max_num_batched_tokens": 1024})
    cfg = yaml.safe_load((tmp_path / "run.yaml").read_text())
    cfg.update(distributed="ray", ray={"num_workers": 2, "num_cpus": 3})  # 2 workers + 1 server actor
    _write(tmp_path, cfg)
    seen: dict[int, set] = {}
    stop = threading.Event()

    def watch(trainer: int) -> None:  # the server processes, their parents and start times, while the run goes
        described = tmp_path / "run" / "servers.json"
        while not stop.is_set():
            if described.exists():
                try:
                    servers = json.loads(described.read_text())
                except ValueError:  # being written
                    servers = []
                for s in servers:
                    stat = _proc_stat(s["pid"])
                    if stat is not None:
                        parent = Path(f"/proc/{stat[0]}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                        seen.setdefault(s["pid"], set()).add((stat[0], stat[1], parent.split()[0]))
            time.sleep(0.5)

    t0 = time.monotonic()
    try:
        res, trainer = _train(tmp_path, watch=watch)
    finally:
        stop.set()
    print(f"toolgym train, Ray: 1 server actor, 2 workers, K=1, 3 steps: {time.monotonic() - t0:.0f} s")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    servers = json.loads((tmp_path / "run" / "servers.json").read_text())
    assert len(servers) == 1 and servers[0]["url"].startswith("http://127.0.0.1:")
    # the server is the child of its actor (a Ray worker process, not the trainer), one process all run long
    assert list(seen) == [servers[0]["pid"]], seen
    assert {(parent, started) for parent, started, _ in seen[servers[0]["pid"]]} == {
        (servers[0]["actor_pid"], min(started for _, started, _ in seen[servers[0]["pid"]]))}, seen
    # its parent is a Ray worker process ("ray::ServerActor.__init__", then "ray::ServerActor"), not the trainer
    assert servers[0]["actor_pid"] != trainer and all(t.startswith("ray::") for _, _, t in seen[servers[0]["pid"]])
    # K=1 on the schedule: steps 1 and 2 on version 0, step 3 exactly on version 1, so the staged weights
    # reached the server through its actor before step 3 was sampled
    train = _check_versions(tmp_path / "run", 3, lag=1, exact=True)
    for r in train:
        assert r["groups_dropped_stale"] == 0 and r["staleness_0"] + r["staleness_1"] == 2, r
    assert train[-1]["weight_pushes"] >= 2  # the start's and version 1's, through the actor
    workers = {w["pid"] for w in json.loads((tmp_path / "run" / "ray_pool.json").read_text())["workers"]}
    # every reward ran in a Ray rollout worker or a scorer process it started: not in the trainer's process
    assert _scorers(tmp_path) and all(pid in workers or parent in workers for pid, parent in _scorers(tmp_path))
    assert trainer not in workers
