"""Weights handed to worker processes through shared memory: one copy however many workers read them.

Why: pickling a state dict to each of N worker processes copies it N times through a pipe (and once more into
each pickle). Here the trainer's tensors are copied once into one flat shared-memory buffer per dtype, and what
travels to a worker is a handle to that buffer (torch's ``multiprocessing`` reductions pass its file
descriptor), plus each tensor's offset and shape. The worker loads its model from views of the buffer, so the
only per-worker copy is the one into its own model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class SharedWeights:
    """A state dict packed into one shared buffer per dtype. ``index``: name -> (dtype key, offset, shape)."""

    buffers: dict[str, Any]
    index: dict[str, tuple[str, int, tuple[int, ...]]]
    nbytes: int

    def tensors(self) -> dict[str, Any]:
        """Views of the buffers under the state dict's names (no copy)."""
        out = {}
        for name, (key, offset, shape) in self.index.items():
            n = 1
            for d in shape:
                n *= d
            out[name] = self.buffers[key][offset:offset + n].view(shape)
        return out


def pack(state_dict: dict[str, Any]) -> SharedWeights:
    """Copy ``state_dict`` (any device) into shared memory, one flat buffer per dtype."""
    import torch
    import torch.multiprocessing  # noqa: F401  (registers the shared-memory reductions on multiprocessing's pickler)

    sizes: dict[str, int] = {}
    dtypes: dict[str, Any] = {}
    index: dict[str, tuple[str, int, tuple[int, ...]]] = {}
    for name, t in state_dict.items():
        key = str(t.dtype).removeprefix("torch.")
        dtypes[key] = t.dtype
        index[name] = (key, sizes.get(key, 0), tuple(t.shape))
        sizes[key] = sizes.get(key, 0) + t.numel()
    buffers = {key: torch.empty(n, dtype=dtypes[key]).share_memory_() for key, n in sizes.items()}
    with torch.no_grad():
        for name, t in state_dict.items():
            key, offset, _ = index[name]
            buffers[key][offset:offset + t.numel()].copy_(t.detach().reshape(-1))
    nbytes = sum(b.numel() * b.element_size() for b in buffers.values())
    return SharedWeights(buffers, index, nbytes)
