"""Starting the vLLM CPU build with nothing set by hand: a KV cache sized from the model and this machine, and a
failed start said in one line with the engine's own reason (before: "Engine core initialization failed. See root
cause above", with the cause 120 lines up in a worker's log, and without VLLM_CPU_KVCACHE_SPACE the engine either
refused to start or sized a 20 GiB KV cache on a 24 GiB machine)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.requirements import need
from toolgym.agents.engine_start import (
    GIB,
    cpu_kv_cache_bytes,
    kv_bytes_per_token,
    root_cause,
    sized_for_this_machine,
)

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-vllm"
# Qwen2.5-0.5B's attention shape (config.json of the asset): 24 layers, 14 heads, 2 KV heads, hidden 896
QWEN = SimpleNamespace(num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, hidden_size=896,
                       max_position_embeddings=32768)


def test_kv_cache_size_from_the_model_and_the_memory() -> None:
    assert kv_bytes_per_token(QWEN, 4) == 2 * 24 * 2 * 64 * 4 == 24576
    one = 24576 * 4096
    kw = {"max_model_len": 4096, "max_num_seqs": 16, "dtype": "float32"}
    assert cpu_kv_cache_bytes(QWEN, kw, available=64 * GIB) == 16 * one  # what 16 sequences can use
    assert cpu_kv_cache_bytes(QWEN, kw, available=2 * GIB) == int(0.25 * 2 * GIB)  # a quarter of what is free
    assert cpu_kv_cache_bytes(QWEN, kw, available=100 << 20) == one  # never less than one whole sequence
    assert cpu_kv_cache_bytes(QWEN, {**kw, "dtype": "bfloat16"}, available=64 * GIB) == 8 * one


def test_a_run_that_sets_the_memory_itself_is_left_alone(monkeypatch) -> None:
    for kw in ({"kv_cache_memory_bytes": 1 << 30}, {"gpu_memory_utilization": 0.5}):
        assert sized_for_this_machine("unused", kw) == (kw, None)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "2")
    assert sized_for_this_machine("unused", {}) == ({}, None)


def test_the_root_cause_is_the_workers_own_error_line() -> None:
    # lines as vLLM 0.32's CPU build printed them here on a failed start (2026-12-04)
    lines = [
        "(VllmWorker-0 pid=26407) ERROR 12-04 22:35:15 [multiproc_executor.py:953] Traceback (most recent call last):",
        "(VllmWorker-0 pid=26407) ERROR 12-04 22:35:15 [multiproc_executor.py:953]     raise ValueError(",
        "(VllmWorker-0 pid=26407) ERROR 12-04 22:35:15 [multiproc_executor.py:953] ValueError: Available memory on "
        "node 0 (13.77/23.54 GiB) on startup is less than desired CPU memory utilization (0.92, 21.66 GiB).",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ]
    assert root_cause(lines) == ("ValueError: Available memory on node 0 (13.77/23.54 GiB) on startup is less than "
                                 "desired CPU memory utilization (0.92, 21.66 GiB).")
    wrapped = ["(EngineCore pid=4216) ERROR 12-04 22:41:37 [core.py:1510] RuntimeError: Worker failed with error "
               "'Available memory on node 0 (19.9/23.54 GiB) on kv cache allocation is less than requested memory "
               "for kv (999.0 GiB).', please check the stack trace above for the root cause"]
    assert root_cause(wrapped) == ("Available memory on node 0 (19.9/23.54 GiB) on kv cache allocation is less than "
                                   "requested memory for kv (999.0 GiB).")
    assert root_cause(["INFO all fine"]) is None


def _rollout(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    return subprocess.run([str(VENV / "bin" / "toolgym"), "rollout", "toolgym/Arith-v0", "--model",
                           "smollm2-135m-instruct", "--sampler", "vllm", "--tasks", "1", "--group", "1", "--max-tokens",
                           "8", "--out", str(tmp_path / "r.jsonl"), "--no-progress"],
                          capture_output=True, text=True, timeout=900, env={**clean, **env}, cwd=tmp_path)


@pytest.mark.vllm
@pytest.mark.slow
def test_the_documented_vllm_command_runs_with_nothing_set_by_hand(tmp_path) -> None:
    need((VENV / "bin" / "toolgym").exists(), f"{VENV} is missing: run scripts/setup_vllm.sh")
    p = _rollout(tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "vLLM CPU build: KV cache" in p.stderr and (tmp_path / "r.jsonl").stat().st_size > 0


@pytest.mark.vllm
@pytest.mark.slow
def test_a_failed_engine_start_is_one_line_with_the_engines_reason(tmp_path) -> None:
    need((VENV / "bin" / "toolgym").exists(), f"{VENV} is missing: run scripts/setup_vllm.sh")
    p = _rollout(tmp_path, VLLM_CPU_KVCACHE_SPACE="4096")  # 4 TiB of KV cache: a real refusal by the engine
    assert p.returncode == 2
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the vLLM engine did not start: Available memory on node")
    assert "4096.0 GiB" in last
