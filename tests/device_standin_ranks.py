"""The two-rank form of the device stand-in (tests/device_standin.py): a process group that refuses what NCCL
refuses, so CI on CPU sees a collective that would raise on GPUs.

A process group initialised with ``nccl`` has no CPU backend: a CPU tensor handed to a collective raises
``No backend type associated with device type cpu`` at the first call. CI runs gloo, which takes CPU tensors
gladly, so a CPU tensor in a collective went unseen. Here gloo still moves the bytes (it takes the stand-in's
wrapper tensors as they are), but every tensor collective of ``torch.distributed`` first refuses a tensor that
is not on the stand-in device, with NCCL's message.

What it covers: the collectives code calls through ``torch.distributed`` (``dist.all_reduce(t)``), including
the tensors ``all_gather_object`` and ``broadcast_object_list`` build (NCCL takes those on the current CUDA
device; here they are built on the CPU by gloo's rules, so the object collectives pass through unchecked).
DDP's own reducer runs in C++ on the module's (stand-in) gradients, unchecked but on the device by
construction. FSDP2 issues its all-gathers and reduce-scatters through ``torch.distributed`` too
(``all_gather_single``, ``reduce_scatter_single``), so they are checked; it runs on the stand-in's ``privateuse1``
form (tests/device_standin_fsdp.py). DTensor's collectives (a full state dict) go through the functional
collectives, unchecked. :data:`CHECKED` counts the checked calls by name, so a test can show they were made.

Use, in each torchrun worker: ``info = init_ranks()`` (gloo underneath, a :class:`DistInfo` whose device is the
stand-in), then run the trainer inside ``standin_mode()`` and ``nccl_rules()``.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.utils._pytree import tree_flatten

from tests import device_standin as S
from tests.device_standin import StandinTensor

NCCL_REFUSAL = "No backend type associated with device type cpu"

# tensor collectives of torch.distributed; object collectives pickle into tensors the backend places itself
TENSOR_COLLECTIVES = ("all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce", "gather",
                      "scatter", "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single",
                      "send", "recv", "isend", "irecv", "all_gather_single", "reduce_scatter_single")
CHECKED: collections.Counter[str] = collections.Counter()  # calls that passed the check, by collective


def refuse_off_device(name: str, collective: Any) -> Any:
    """``collective`` that first raises NCCL's RuntimeError for any tensor argument not on the stand-in device."""

    @functools.wraps(collective)
    def checked(*args: Any, **kwargs: Any) -> Any:
        flat, _ = tree_flatten((args, kwargs))
        for t in flat:
            if isinstance(t, torch.Tensor) and not isinstance(t, StandinTensor):
                raise RuntimeError(f"{NCCL_REFUSAL} (torch.distributed.{name} of a tensor on {t.device}; "
                                   f"the group's device is the stand-in {S.STANDIN!r}, as cuda under nccl)")
        CHECKED[name] += 1
        return collective(*args, **kwargs)

    return checked


@contextlib.contextmanager
def nccl_rules() -> Iterator[None]:
    """Within the block, ``torch.distributed``'s tensor collectives refuse a tensor off the stand-in device."""
    saved = {name: getattr(dist, name) for name in TENSOR_COLLECTIVES if hasattr(dist, name)}
    for name, fn in saved.items():
        setattr(dist, name, refuse_off_device(name, fn))
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(dist, name, fn)


def init_ranks() -> Any:
    """Join torchrun's gloo group; the :class:`DistInfo` a CUDA rank would get, with the stand-in as its device.
    The trainer's ``data_parallel.init`` then returns it too, as CUDA ranks get ``cuda:LOCAL_RANK`` there."""
    from toolgym.training.update import data_parallel

    if not dist.is_initialized():
        dist.init_process_group(backend="gloo")
    info = data_parallel.DistInfo(rank=dist.get_rank(), world=dist.get_world_size(),
                                  local_rank=int(os.environ.get("LOCAL_RANK", "0")), device=str(S._DEVICE))
    data_parallel.init = lambda spec=None: info
    return info
