"""Micro-batch metrics summed where they were computed and read from the device once per update.

A host read (``float(t)``, ``.item()``) waits for every queued kernel: one per micro-batch and metric would
stall a GPU many times per step. Objectives return numbers or 0-dim tensors; this keeps token-weighted
running sums of them beside the loss and reads them all with a single ``tolist()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

#: not averaged over micro-batches: totals and order statistics of one call mean nothing summed
_NOT_AVERAGED = ("loss", "tokens", "seqs")


def averaged(key: str) -> bool:
    return key not in _NOT_AVERAGED and not key.endswith(("_min", "_max")) and not key.startswith("ratio_p")


class MetricSums:
    """Token-weighted means of micro-batch metrics (non-finite values left out), plus named totals."""

    def __init__(self) -> None:
        self._sums: dict[str, Tensor] = {}
        self._weights: dict[str, Tensor] = {}
        self._totals: dict[str, Tensor] = {}

    def add(self, metrics: Mapping[str, Any], device: torch.device) -> None:
        """One micro-batch's metrics, weighted by its ``tokens`` (1 when absent)."""
        w = torch.as_tensor(metrics.get("tokens", 1.0), dtype=torch.float64, device=device).detach().reshape(())
        for key, value in metrics.items():
            if not averaged(key) or isinstance(value, (str, bool)) or value is None:
                continue
            v = torch.as_tensor(value, dtype=torch.float64, device=device).detach().reshape(())
            finite = torch.isfinite(v)
            part = torch.where(finite, v * w, 0.0)
            weight = torch.where(finite, w, 0.0)
            self._sums[key] = self._sums[key] + part if key in self._sums else part
            self._weights[key] = self._weights[key] + weight if key in self._weights else weight

    def total(self, key: str, value: Any, device: torch.device) -> None:
        """Add ``value`` (a number or 0-dim tensor) to the running total ``key``."""
        v = torch.as_tensor(value, dtype=torch.float64, device=device).detach().reshape(())
        self._totals[key] = self._totals[key] + v if key in self._totals else v

    def read(self, series: Mapping[str, list[Tensor]] | None = None) -> tuple[dict[str, float], dict[str, list[float]]]:
        """(means and totals, each ``series`` as floats): the one host read of the update."""
        keys = list(self._sums)
        parts = [self._sums[k] for k in keys] + [self._weights[k] for k in keys]
        tkeys = list(self._totals)
        parts += [self._totals[k] for k in tkeys]
        series = dict(series or {})
        lengths = {name: len(vals) for name, vals in series.items()}
        for vals in series.values():
            parts += [v.detach().to(torch.float64).reshape(()) for v in vals]
        flat = torch.stack(parts).tolist() if parts else []
        n = len(keys)
        out = {k: flat[i] / flat[n + i] for i, k in enumerate(keys) if flat[n + i] > 0}
        out.update({k: flat[2 * n + i] for i, k in enumerate(tkeys)})
        pos = 2 * n + len(tkeys)
        read_series: dict[str, list[float]] = {}
        for name, count in lengths.items():
            read_series[name] = flat[pos : pos + count]
            pos += count
        return out, read_series
