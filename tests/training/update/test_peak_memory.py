"""``peak_memory_gb``: the peak of one step (CPU: peak RSS since a reset; CUDA: max allocated), logged per step."""

from __future__ import annotations

import mmap

from tests.training.test_device_trainer import _trainer
from tests.training.trainer_util import tiny_config
from toolgym.training.update.peak_memory import peak_memory_gb, reset_peak


def test_the_cpu_peak_sees_an_allocation_and_a_reset_forgets_it() -> None:
    # an anonymous mapping of our own, touched page by page and unmapped: its pages leave the resident set at
    # once (a tensor's memory may stay with the allocator, or behind another reference in a long test session)
    assert reset_peak("cpu"), "Linux lets a process reset its own peak RSS"
    base = peak_memory_gb("cpu")
    size = 300_000_000
    region = mmap.mmap(-1, size)
    for off in range(0, size, mmap.PAGESIZE):
        region[off] = 1
    high = peak_memory_gb("cpu")
    assert high >= base + 0.25
    region.close()
    assert reset_peak("cpu")
    assert peak_memory_gb("cpu") < high - 0.25


def test_a_step_logs_its_peak_memory(tmp_path, monkeypatch) -> None:
    rollout = {**tiny_config(tmp_path)["rollout"], "sandbox": None,
               "env_kwargs": {"min_digits": 1, "max_digits": 1, "system_prompt": None, "max_turns": 1, "parser": "none"}}
    tr = _trainer(tmp_path, "cpu", monkeypatch, rollout=rollout)
    obj = tr.objective = tr.algorithm.objective(tr.cfg)
    tr._build_rollouts()
    rss = _rss_gb()
    try:
        m = tr.step(0, 0, obj)
    finally:
        tr.orchestrator.close()
    params = sum(p.numel() * p.element_size() for p in tr.module.parameters()) / 1e9
    assert params < m["peak_memory_gb"] < 1e3  # the process's peak RSS: more than its weights, less than a machine
    # reset at the step's start, it is at least about the RSS the step began with (a few pages may be freed
    # between this reading and the reset: 16 KB once in a full run)
    assert m["peak_memory_gb"] >= rss - 0.05


def _rss_gb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 / 1e9 for line in f if line.startswith("VmRSS:"))
