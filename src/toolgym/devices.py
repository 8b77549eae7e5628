"""Where a model runs: ``auto | cpu | cuda | cuda:N``, one resolution for every command.

``auto`` takes CUDA when ``torch.cuda.is_available()``, else the CPU. Under torchrun (``LOCAL_RANK``
set) ``auto`` and ``cuda`` become ``cuda:LOCAL_RANK``, one GPU per rank. torch is imported only when
the availability has to be asked.
"""

from __future__ import annotations

import os
import re

from toolgym.errors import ConfigError

DEVICE_CHOICES = "auto, cpu, cuda or cuda:N (N = GPU index)"
_FORM = re.compile(r"^(auto|cpu|cuda)(?::(\d+))?$")


def parse_device(spec: str | None, what: str = "device") -> tuple[str, int | None]:
    """``(kind, index)`` of a device string; kind is auto, cpu or cuda, index only with cuda:N.
    Raises :class:`ConfigError` with one line listing the allowed forms."""
    text = "auto" if spec is None else str(spec).strip().lower()
    m = _FORM.match(text)
    if m is None or (m.group(2) is not None and m.group(1) != "cuda"):
        raise ConfigError(f"{what}: must be {DEVICE_CHOICES}; got {spec!r}")
    return m.group(1), (int(m.group(2)) if m.group(2) is not None else None)


def check_device(spec: str | None, what: str = "device") -> str:
    """The normalized spelling of a valid device string (no hardware is asked)."""
    kind, index = parse_device(spec, what)
    return kind if index is None else f"{kind}:{index}"


def _local_rank_from_env() -> int | None:
    value = os.environ.get("LOCAL_RANK")
    if value is None or int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    return int(value)


def resolve_device(spec: str | None = "auto", *, what: str = "device", cuda_available: bool | None = None,
                   cuda_count: int | None = None, local_rank: int | None | str = "env") -> str:
    """The torch device string for ``spec``: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.

    ``cuda_available`` / ``cuda_count`` default to asking torch; ``local_rank`` defaults to
    ``LOCAL_RANK`` of a torchrun launch with more than one process (None: a single process).
    ``cuda``/``cuda:N`` without CUDA, an index past the visible GPUs, or ``cuda:N`` under torchrun
    (each rank takes its own GPU) raise :class:`ConfigError` with one actionable line.
    """
    kind, index = parse_device(spec, what)
    rank = _local_rank_from_env() if local_rank == "env" else local_rank
    assert rank is None or isinstance(rank, int)
    if kind == "cpu":
        return "cpu"
    if cuda_available is None:
        import torch

        cuda_available = bool(torch.cuda.is_available())
    if kind == "auto" and (not cuda_available or rank is None):
        return "cuda" if cuda_available else "cpu"
    if not cuda_available:
        raise ConfigError(f"{what}: {spec!r} asks for CUDA, but CUDA is not available here (no GPU visible, or a "
                          "CPU-only torch build); use cpu or auto, or install a CUDA build of torch")
    if index is not None and rank is not None:
        raise ConfigError(f"{what}: {spec!r} names one GPU, but under torchrun each rank takes "
                          "cuda:LOCAL_RANK; use cuda or auto")
    use = index if index is not None else rank
    if use is None:
        return "cuda"
    if cuda_count is None:
        import torch

        cuda_count = int(torch.cuda.device_count())
    if use >= cuda_count:
        source = "LOCAL_RANK" if index is None else spec
        raise ConfigError(f"{what}: {source} needs GPU {use}, but only {cuda_count} GPU(s) are visible "
                          f"(CUDA_VISIBLE_DEVICES?); use cuda:0..cuda:{max(cuda_count - 1, 0)} or auto")
    return f"cuda:{use}"
