"""Shared tiny run configs for the trainer tests (a 1-layer demo model, 2 prompts x 2 rollouts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def tiny_config(out: Path, **over: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "algorithm": "ctpo",
        "seed": 0,
        "output_dir": str(out),
        "steps": 2,
        "mini_batches": 2,
        "model": {"name_or_path": "demo",
                  "model_kwargs": {"layers": 1, "hidden": 32, "heads": 2, "intermediate": 64, "max_positions": 128,
                                   "vocab_size": 300}},
        "rollout": {"env": "toolgym/Arith-v0",
                    "env_kwargs": {"min_digits": 1, "max_digits": 1, "system_prompt": None, "max_turns": 2},
                    "group_size": 2, "prompts_per_step": 2, "max_turns": 2, "max_new_tokens": 8,
                    "max_response_tokens": 32, "temperature": 1.0, "sandbox": "auto", "sandbox_pool": 1},
        "optimizer": {"lr": 1e-3},
        "sft": {"enabled": True, "demos": 16, "epochs": 1, "lr": 1e-3, "batch_size": 8, "max_seq_len": 64},
        "eval": {"every": 0, "tasks": 2, "temperature": 1.0, "at_start": False},
        "checkpoint": {"every": 1, "keep_last": 3},
        "logging": {"progress": False, "plot": False},
    }
    for key, value in over.items():
        section, _, field = key.partition("__")
        if field:
            cfg.setdefault(section, {})[field] = value
        else:
            cfg[section] = value
    return cfg


def two_rank_config(out: Path) -> dict[str, Any]:
    """The two-rank stand-in runs' config (DDP and FSDP): an SFT warm start, then one step of 4 prompts (2 per
    rank) of one-turn addition, no sandbox."""
    cfg = tiny_config(out, steps=1, sft={"enabled": True, "demos": 16, "epochs": 1, "lr": 3e-3, "batch_size": 8,
                                         "max_seq_len": 64, "tool_fraction": 0.0, "direct_correct": 0.5})
    cfg["rollout"].update(prompts_per_step=4, sandbox=None)
    cfg["rollout"]["env_kwargs"].update(ops="+", max_turns=1)
    cfg["rollout"]["max_turns"] = 1
    return cfg


def kill_at_checkpoint(argv: list[str], out: Path, step: int, *, group: bool = False, deadline_s: float = 600,
                       **popen: Any) -> int:
    """Run ``argv`` (a ``toolgym train``), SIGKILL it as soon as ``out``'s checkpoint of ``step`` exists, and
    return its exit status. ``group``: the whole process group; else the trainer alone (its workers and servers
    must then go with it by themselves)."""
    import os
    import signal
    import subprocess
    import time

    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            **popen)
    try:
        deadline = time.time() + deadline_s
        while not (out / "checkpoints" / f"step-{step:06d}").exists():
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.time() < deadline
            time.sleep(0.05)
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            os.kill(proc.pid, signal.SIGKILL)
        return proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
