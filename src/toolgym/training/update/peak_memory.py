"""Peak memory of one training step: the ``peak_memory_gb`` metric (10^9 bytes).

CUDA: ``torch.cuda.max_memory_allocated`` of the trainer's device (tensors held by torch's allocator, not its
cache nor another process such as a separate engine), reset at the start of each step. Elsewhere: the
process's peak resident set size during the step (Linux: ``VmHWM``, reset by writing 5 to
``/proc/self/clear_refs``); where that reset is refused, the peak since the process started.
"""

from __future__ import annotations

import resource
import sys

import torch


def reset_peak(device: str | torch.device) -> bool:
    """Start a new peak; False when only the peak since the process started can be read."""
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return True
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_memory_gb(device: str | torch.device) -> float:
    """The peak since :func:`reset_peak` (see the module docstring for what it counts on each device)."""
    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 1e9
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024 / 1e9
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux, bytes on macOS
    return rss / 1e9 if sys.platform == "darwin" else rss * 1024 / 1e9
