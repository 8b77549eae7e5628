"""FSDP2's form of the device stand-in: the stand-in's tensors (tests/device_standin.py) report a ``privateuse1``
device named ``standin`` instead of ``meta``, so FSDP2 shards and trains them as it does CUDA tensors.

Why not ``meta``: FSDP2 takes ``meta`` parameters for deferred initialisation (never moved, never gathered) and
asks the device's module for streams and events, which ``meta`` lacks. A ``privateuse1`` backend registered from
Python (``torch.utils.backend_registration``) gives a device type with a no-op device guard, and
:class:`_DeviceModule` gives it the CPU's stream stubs (one stream, events that are done at once, as on the CPU).
FSDP2 then sees an accelerator like CUDA: its default mesh is on ``standin``, it moves inputs to the device, and
every tensor it hands ``torch.distributed`` is a stand-in tensor, which the two-rank form's ``nccl_rules()``
checks (tests/device_standin_ranks.py).

One adaptation of FSDP itself: it frees and reallocates an unsharded parameter's memory by resizing its
storage, and a wrapper tensor has none of its own; :func:`install` makes those two helpers resize the storage of
the CPU tensor the stand-in wraps (the same memory FSDP meant).

Use, once per process and before anything else touches devices: ``install()``; then ``init_ranks()``,
``standin_mode()`` and ``nccl_rules()`` as for DDP. A process cannot go back to ``meta`` afterwards.
"""

from __future__ import annotations

from typing import Any

import torch

from tests import device_standin as S

NAME = "standin"


class _DeviceModule:
    """``torch.standin``: what FSDP2 and DeviceMesh ask of a device module, answered as for one CPU-backed device."""

    Stream = torch.cpu.Stream
    Event = torch.Event

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def _is_in_bad_fork(self) -> bool:
        return False

    def device_count(self) -> int:
        return 1

    def current_device(self) -> int:
        return 0

    def set_device(self, device: Any) -> None:
        """One device per rank, as each CUDA rank sees its own."""

    def manual_seed_all(self, seed: int) -> None:
        """The stand-in's random numbers come from the CPU generator."""

    def current_stream(self, device: Any = None) -> Any:
        return torch.cpu.current_stream()

    def stream(self, stream: Any) -> Any:
        return torch.cpu.stream(stream)

    def synchronize(self, device: Any = None) -> None:
        """The CPU computes synchronously: nothing to wait for."""


def _resize_inner(original: Any, empty: bool) -> Any:
    """FSDP's ``alloc_storage`` (``empty`` False) or ``free_storage`` acting on a stand-in's wrapped CPU tensor."""

    def resize(tensor: torch.Tensor) -> None:
        if not isinstance(tensor, S.StandinTensor):
            return original(tensor)
        inner = tensor.inner
        size = 0 if empty else inner.numel() * inner.itemsize
        if (storage := inner.untyped_storage()).size() != size:
            storage.resize_(size)
        return None

    return resize


def install() -> None:
    """Register the ``standin`` device, make it the stand-in's device, and teach FSDP2 the stand-in's storage."""
    from torch.distributed.fsdp._fully_shard import _fsdp_param, _fsdp_param_group
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    if torch._C._get_privateuse1_backend_name() != NAME:
        _setup_privateuseone_for_python_backend(rename=NAME, backend_module=_DeviceModule())
    S.switch_device(NAME, 0)
    alloc, free = _fsdp_param.alloc_storage, _fsdp_param.free_storage
    _fsdp_param.alloc_storage = _fsdp_param_group.alloc_storage = _resize_inner(alloc, empty=False)
    _fsdp_param.free_storage = _resize_inner(free, empty=True)
