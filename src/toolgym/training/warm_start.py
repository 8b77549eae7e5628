"""The parts of a run around the RL loop: the supervised warm start before it and the summary after it."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from toolgym.training import sft as S
from toolgym.training.outputs.checkpoint import latest_checkpoint
from toolgym.training.outputs.logging import read_metrics
from toolgym.training.update import data_parallel as D


def demonstrations(cfg: Any, out: Path, main: bool) -> list[dict[str, Any]]:
    """``sft.data`` read, or generated Arith demonstrations (written to the run folder by the main process)."""
    s = cfg.sft
    if s.data:
        return S.read_demonstrations(s.data)
    first = cfg.rollout.mixture()[0]  # with several environments, the first one's tasks
    demos = S.arith_demonstrations(s.demos, seed=cfg.seed, tool_fraction=s.tool_fraction,
                                   direct_correct=s.direct_correct, env_id=first.env, env_kwargs=first.env_kwargs)
    if main:
        out.mkdir(parents=True, exist_ok=True)
        S.write_demonstrations(demos, out / "demonstrations.jsonl")
    return demos


def warm_start(cfg: Any, module: Any, template: Any, pad_id: int, dist: Any, logger: Any,
               demos: list[dict[str, Any]]) -> None:
    """Supervised training on the assistant tokens of ``demos`` (each rank its shard, gradients averaged)."""
    s = cfg.sft
    trajs = S.demonstration_trajectories(template, demos, s.max_seq_len)
    shard = trajs[dist.rank :: dist.world]
    t0 = time.perf_counter()
    logger.start_bar("sft", math.ceil(len(shard) / s.batch_size) * s.epochs, unit="batches")
    res = S.sft_train(module, shard, epochs=s.epochs, lr=s.lr, batch_size=s.batch_size, pad_id=pad_id,
                      seed=cfg.seed, sync_grads=lambda mod: D.average_grads(mod, dist),
                      on_step=lambda r: logger.progress(int(r["sft_step"]), r))
    logger.end_bar()  # the RL steps get their own, from the loop
    res["sft_s"] = time.perf_counter() - t0
    res["demonstrations"] = len(trajs)
    D.broadcast_model(module, dist)
    logger.log("sft", 0, res)
    logger.say(f"SFT warm start: {len(trajs)} demonstrations, {s.epochs} epochs, loss {res['sft_loss']:.3f}, "
               f"{res['sft_s']:.0f}s")


def run_summary(cfg: Any, out: Path, steps: int, *, main: bool) -> dict[str, Any]:
    """What ``toolgym train --json`` prints and ``summary.json`` keeps: the trained policy's folder, the held-out
    reward before and after, the plot."""
    summary: dict[str, Any] = {"steps": steps, "output_dir": str(out)}
    if not main:
        return summary
    final = latest_checkpoint(out / "checkpoints")
    if final is not None and (final / "hf").is_dir():
        summary["hf"] = str(final / "hf")  # the trained policy as a Hugging Face folder
    evals = read_metrics(out, "eval")
    if evals:
        summary["before"] = {k: evals[0].get(k) for k in ("step", "reward_mean", "tool_rate")}
        summary["after"] = {k: evals[-1].get(k) for k in ("step", "reward_mean", "tool_rate")}
    if cfg.logging.plot:
        from toolgym.training.outputs.plot import plot_run

        summary["plot"] = str(plot_run(read_metrics(out), out / "curves.png",
                                       title=f"{cfg.algorithm} on {' + '.join(e.label for e in cfg.rollout.mixture())}"))
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
