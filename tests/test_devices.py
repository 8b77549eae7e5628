"""`device: auto | cpu | cuda | cuda:N`: the pure resolution for every form (CUDA faked through the
`cuda_available` argument, not by mocking torch), torchrun's LOCAL_RANK mapping, the deprecated
TOOLGYM_DEVICE, the config field, and `--device` on every command that runs a model."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from toolgym.devices import DEVICE_CHOICES, check_device, parse_device, resolve_device
from toolgym.errors import ConfigError

CLI = [sys.executable, "-c", "from toolgym.cli import main; main()"]
HAS_CUDA = torch.cuda.is_available()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300)


def _one_error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


# ----------------------------------------------------------------------------- resolution


@pytest.mark.parametrize(("spec", "parsed"), [
    ("auto", ("auto", None)), ("cpu", ("cpu", None)), ("cuda", ("cuda", None)), ("cuda:1", ("cuda", 1)),
    (" CUDA:12 ", ("cuda", 12)), (None, ("auto", None)),
])
def test_parse_forms(spec: str | None, parsed: tuple[str, int | None]) -> None:
    assert parse_device(spec) == parsed


@pytest.mark.parametrize("bad", ["tpu", "gpu", "cuda:", "cuda:-1", "cpu:0", "auto:1", "cuda:x", "mps", ""])
def test_bad_forms_list_the_allowed_ones(bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_device(bad, "--device")
    assert str(info.value) == f"--device: must be {DEVICE_CHOICES}; got {bad!r}"


def test_auto_and_cpu() -> None:
    assert resolve_device("cpu", cuda_available=True, local_rank=None) == "cpu"
    assert resolve_device("auto", cuda_available=False, local_rank=None) == "cpu"
    assert resolve_device("auto", cuda_available=True, local_rank=None) == "cuda"
    # the real question to torch, on this machine
    assert resolve_device("auto", local_rank=None) == ("cuda" if HAS_CUDA else "cpu")


def test_cuda_without_cuda_is_one_actionable_line() -> None:
    for spec in ("cuda", "cuda:0"):
        with pytest.raises(ConfigError) as info:
            resolve_device(spec, what="--device", cuda_available=False, local_rank=None)
        msg = str(info.value)
        assert msg.startswith(f"--device: {spec!r} asks for CUDA, but CUDA is not available here")
        assert "use cpu or auto" in msg and "\n" not in msg


def test_cuda_index() -> None:
    assert resolve_device("cuda:1", cuda_available=True, cuda_count=2, local_rank=None) == "cuda:1"
    assert resolve_device("cuda", cuda_available=True, cuda_count=2, local_rank=None) == "cuda"
    with pytest.raises(ConfigError, match=r"needs GPU 2, but only 2 GPU\(s\) are visible"):
        resolve_device("cuda:2", cuda_available=True, cuda_count=2, local_rank=None)


def test_torchrun_ranks_take_their_local_gpu() -> None:
    for spec in ("auto", "cuda"):
        assert resolve_device(spec, cuda_available=True, cuda_count=4, local_rank=3) == "cuda:3"
    assert resolve_device("auto", cuda_available=False, local_rank=3) == "cpu"  # gloo on CPUs
    assert resolve_device("cpu", cuda_available=True, local_rank=3) == "cpu"
    with pytest.raises(ConfigError, match="each rank takes cuda:LOCAL_RANK"):
        resolve_device("cuda:1", cuda_available=True, cuda_count=4, local_rank=0)
    with pytest.raises(ConfigError, match="LOCAL_RANK needs GPU 2, but only 2"):
        resolve_device("auto", cuda_available=True, cuda_count=2, local_rank=2)


def test_local_rank_comes_from_torchrun_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert resolve_device("auto", cuda_available=True, cuda_count=2) == "cuda:1"
    monkeypatch.setenv("WORLD_SIZE", "1")  # a single process ignores a stray LOCAL_RANK
    assert resolve_device("auto", cuda_available=True, cuda_count=2) == "cuda"


# ----------------------------------------------------------------------------- trainer side


def test_distributed_init_single_process(monkeypatch: pytest.MonkeyPatch) -> None:
    from toolgym.training.update import data_parallel as D

    monkeypatch.delenv("TOOLGYM_DEVICE", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert D.init("cpu").device == "cpu"
    assert D.init().device == ("cuda" if HAS_CUDA else "cpu")  # auto: CUDA whenever there is one
    with D.default_device("cpu"):
        assert D.init().device == "cpu"
        assert D.init("auto").device == ("cuda" if HAS_CUDA else "cpu")  # an explicit device wins
    if not HAS_CUDA:
        with pytest.raises(ConfigError, match="^model.device: 'cuda' asks for CUDA"):
            D.init("cuda")


def test_toolgym_device_is_a_deprecated_override_of_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    from toolgym.training.update import data_parallel as D

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("TOOLGYM_DEVICE", "cpu")
    with pytest.warns(FutureWarning, match="TOOLGYM_DEVICE is deprecated"):
        assert D.init().device == "cpu"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an explicit device is not overridden, and no warning
        assert D.init("cpu").device == "cpu"
    if not HAS_CUDA:
        monkeypatch.setenv("TOOLGYM_DEVICE", "cuda")
        with pytest.warns(FutureWarning), pytest.raises(ConfigError, match=r"^TOOLGYM_DEVICE \(deprecated"):
            D.init()


def test_config_device_field() -> None:
    from toolgym.training.config import config_to_dict, load_config

    base = {"model": {"name_or_path": "demo"}, "rollout": {"env": "toolgym/Arith-v0"}}
    assert load_config(base).model.device == "auto"
    cfg = load_config(base, ["model.device=CUDA:1"])
    assert cfg.model.device == "cuda:1" and config_to_dict(cfg)["model"]["device"] == "cuda:1"
    with pytest.raises(ConfigError) as info:
        load_config(base, ["model.device=tpu"])
    assert str(info.value) == f"model.device: must be {DEVICE_CHOICES}; got 'tpu'"


def test_train_device_flag_reaches_the_trainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`toolgym train --device cpu` overrides model.device, and the Trainer's D.init() sees it."""
    from typer.testing import CliRunner

    import toolgym.training.trainer as T
    from toolgym.cli import app
    from toolgym.training.update import data_parallel as D

    seen: dict[str, str] = {}

    def fake_train(cfg, resume=False, console=True):  # noqa: ANN001, ANN202
        seen["config"] = cfg.model.device
        seen["init"] = D.init().device  # what Trainer.__init__ calls
        return {}

    monkeypatch.setattr(T, "train", fake_train)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  name_or_path: demo\n  device: auto\nrollout:\n  env: toolgym/Arith-v0\n")
    res = CliRunner().invoke(app, ["train", str(cfg), "--device", "cpu"])
    assert res.exit_code == 0, res.output
    assert seen == {"config": "cpu", "init": "cpu"}
    res = CliRunner().invoke(app, ["train", str(cfg), "--device", "tpu"])
    assert res.exit_code == 2 and f"error: --device: must be {DEVICE_CHOICES}; got 'tpu'" in res.output
    if not HAS_CUDA:
        res = CliRunner().invoke(app, ["train", str(cfg), "--device", "cuda"])
        assert res.exit_code == 2 and "error: model.device: 'cuda' asks for CUDA" in res.output, res.output


# ----------------------------------------------------------------------------- the commands


@pytest.mark.slow
def test_device_flag_refuses_bad_forms_on_every_model_command(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model:\n  name_or_path: demo\nrollout:\n  env: toolgym/Arith-v0\n")
    rollouts = tmp_path / "r.jsonl"
    rollouts.write_text("")
    want = f"error: --device: must be {DEVICE_CHOICES}; got 'tpu'"
    for args in (["rollout", "toolgym/Arith-v0", "--model", "smollm2-135m-instruct", "--out", str(tmp_path / "o.jsonl")],
                 ["bench", "math", "--model", "smollm2-135m-instruct", "--out", str(tmp_path / "b")],
                 ["train", str(cfg)], ["sft", str(cfg), "--out", str(tmp_path / "s")],
                 ["analyze", "teacher-signal", str(rollouts), "--model", "smollm2-135m-instruct"]):
        assert _one_error_line(_cli(*args, "--device", "tpu")) == want, args


@pytest.mark.slow
@pytest.mark.skipif(HAS_CUDA, reason="needs a machine without CUDA")
def test_cuda_flag_without_cuda_is_one_line(tmp_path: Path) -> None:
    r = _cli("rollout", "toolgym/Arith-v0", "--model", "smollm2-135m-instruct", "--out", str(tmp_path / "o.jsonl"),
             "--device", "cuda")
    assert _one_error_line(r).startswith("error: --device: 'cuda' asks for CUDA, but CUDA is not available here")
    r = _cli("bench", "math", "--model", "smollm2-135m-instruct", "--out", str(tmp_path / "b"), "--device", "cuda:0")
    assert _one_error_line(r).startswith("error: --device: 'cuda:0' asks for CUDA")


@pytest.mark.slow
def test_bench_device_is_recorded_and_completions_need_no_model(tmp_path: Path) -> None:
    data = tmp_path / "q.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": "?", "answer": str(i)}) + "\n" for i in range(2)))
    suite = tmp_path / "s.yaml"
    suite.write_text(f"name: s\nentries:\n  - name: m\n    env: toolgym/MathTIR-v0\n    source: 'asset:{data}'\n"
                     "    metric: pass@1\n    options: {dataset: gsm8k}\n")
    comp = tmp_path / "c.jsonl"
    comp.write_text("".join(json.dumps({"id": f"q{i}", "completion": f"\\boxed{{{i}}}"}) + "\n" for i in range(2)))
    r = _cli("bench", str(suite), "--model", "m", "--completions", str(comp), "--out", str(tmp_path / "o"),
             "--device", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["config"]["device"] == "cpu"


def test_hf_sampler_device() -> None:
    from tests.training.tiny import tiny_lm
    from toolgym.agents.hf_sampler import HFSampler

    model = tiny_lm(vocab=64)
    s = HFSampler(model, None)  # a loaded model stays where it is
    assert s.device == "cpu"
    s = HFSampler(model, None, device="cpu")
    assert s.device == "cpu" and next(s.model.parameters()).device.type == "cpu"
    if not HAS_CUDA:
        with pytest.raises(ConfigError, match="CUDA is not available"):
            HFSampler(model, None, device="cuda")
    with pytest.raises(ConfigError, match="must be auto, cpu, cuda or cuda:N"):
        HFSampler(model, None, device="tpu")
