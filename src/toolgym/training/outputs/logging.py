"""Run metrics: one JSONL record per event, TensorBoard scalars, optional W&B, a progress display (_progress).

JSONL is the record of truth (``metrics.jsonl`` in the run folder; the plot and the resume test
read it). TensorBoard and W&B are mirrors. Only rank 0 writes anything.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from toolgym._jsonl import iter_jsonl
from toolgym._progress import Bar
from toolgym.errors import ConfigError


class MetricsLogger:
    """``log(kind, step, metrics)`` appends ``{"kind", "step", "time", **metrics}``."""

    def __init__(self, out_dir: str | Path, *, jsonl: bool = True, tensorboard: bool = False, wandb: bool = False,
                 wandb_project: str | None = None, progress: bool = True,
                 config: dict[str, Any] | None = None, enabled: bool = True) -> None:
        self.enabled = enabled
        self.out = Path(out_dir)
        self.path = self.out / "metrics.jsonl"
        self._fh = None
        self._tb = None
        self._wandb = None
        self._bar: Bar | None = None
        self._show_progress = False
        self._t0 = time.time()
        if not enabled:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        if jsonl:
            self._fh = self.path.open("a", buffering=1)
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # torch's writer needs the tensorboard package (e.g. a bare vLLM environment)
                raise ConfigError("logging.tensorboard: true needs the tensorboard package (pip install tensorboard), "
                                  "or set logging.tensorboard: false") from None
            self._tb = SummaryWriter(str(self.out / "tb"))
        if wandb:
            try:
                import wandb as wb
            except ImportError:
                raise ConfigError("logging.wandb: true needs the wandb package (pip install wandb)") from None
            self._wandb = wb.init(project=wandb_project or "toolgym", config=config or {}, dir=str(self.out))
        self._show_progress = progress

    def log(self, kind: str, step: int, metrics: dict[str, Any]) -> None:
        if not self.enabled:
            return
        rec = {"kind": kind, "step": step, "time": round(time.time() - self._t0, 3), **_plain(metrics)}
        if self._fh is not None:
            self._fh.write(json.dumps(rec) + "\n")
        scalars = {k: v for k, v in rec.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
                   and k not in ("step", "time") and math.isfinite(v)}
        if self._tb is not None:
            for k, v in scalars.items():
                self._tb.add_scalar(f"{kind}/{k}", v, step)
        if self._wandb is not None:
            self._wandb.log({f"{kind}/{k}": v for k, v in scalars.items()}, step=step)

    def start_bar(self, label: str, total: int, done: int = 0, unit: str = "") -> None:
        """A new progress display (the previous one ends): SFT batches, then RL steps from the resumed one."""
        self.end_bar()
        if self.enabled and self._show_progress:
            self._bar = Bar(label, total, done=done, unit=unit)

    def progress(self, step: int, metrics: dict[str, Any]) -> None:
        if self._bar is None:
            return
        info = ""
        if "reward_mean" in metrics:
            info = (f"reward {metrics['reward_mean']:.3f}  clip {metrics.get('clip_frac', 0.0):.3f}  "
                    f"{metrics.get('tokens_per_s', 0.0):.0f} tok/s")
        elif "sft_loss" in metrics:
            info = f"loss {metrics['sft_loss']:.3f}"
        self._bar.update(step, info)

    def say(self, text: str) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.say(text)
        else:
            print(text, flush=True)

    def end_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def close(self) -> None:
        self.end_bar()
        if self._fh is not None:
            self._fh.close()
            self._fh = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None


def _plain(d: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if hasattr(v, "item") and getattr(v, "numel", lambda: 2)() == 1:
            v = v.item()
        if isinstance(v, float) and not math.isfinite(v):
            v = None if math.isnan(v) else (1e308 if v > 0 else -1e308)
        out[k] = v
    return out


def read_metrics(path: str | Path, kind: str | None = None) -> list[dict[str, Any]]:
    """Records of ``metrics.jsonl``; for a step logged twice (a resumed run) the last one wins."""
    recs: dict[tuple[str, int], dict[str, Any]] = {}
    p = Path(path)
    if p.is_dir():
        p = p / "metrics.jsonl"
    # a run killed mid-write leaves a torn last line: pass it over (the step is logged again on resume)
    for _, r in iter_jsonl(p, skip_invalid=True):
        if kind is None or r.get("kind") == kind:
            recs[(r.get("kind"), r.get("step"))] = r
    return sorted(recs.values(), key=lambda r: (r["step"], r["kind"]))
