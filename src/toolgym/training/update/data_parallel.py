"""Data parallelism for the trainer: DDP on CPU (gloo) or GPUs (nccl), FSDP2 for large models on GPUs.

Under ``torchrun --nproc_per_node N toolgym train CONFIG.yaml`` every rank builds the same model
(same seed), samples rollouts for its own slice of the step's prompts with its own sampler (which
shares the rank's local module, so weight sync is free), and the gradients are averaged by DDP. The
token-mean loss divides by the *global* policy-token count (all-reduced), and each rank's loss is
multiplied by the world size, so DDP's mean of gradients equals the gradient of the global token mean.

FSDP path (GPUs). ``wrap_model(model, "fsdp")`` shards every decoder layer and then the root with
``torch.distributed.fsdp.fully_shard`` (FSDP2; parameters become DTensors, optimizer state is sharded
too). Rollouts then need full weights: with vLLM, gather with
``torch.distributed.checkpoint.state_dict.get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))``
on rank 0 and push them with ``VLLMSampler.update_weights``. Select it with ``TOOLGYM_PARALLEL=fsdp``.
Checkpoints and weight sync gather the full (unsharded) state with :func:`full_state_dict` /
:func:`full_optimizer_state_dict` (a collective: every rank calls it; rank 0 saves), and resume loads it
back with :func:`load_full_state_dict`. FSDP2 runs on CPU with gloo (torch 2.13): tests/training/test_fsdp.py
checks checkpoint and resume on 2 ranks. Rollouts and evaluation with the shared-module HF sampler decode
inside :func:`full_params_for_decoding`: every rank all-gathers the full weights once before and none during
decoding, so ranks that generate different lengths (different numbers of forwards) never wait on each other
(without it each forward all-gathers each layer, and the rank that stops first leaves the other hanging).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class DistInfo:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: str = "cpu"

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world > 1


_DEFAULT_DEVICE: list[str] = []  # innermost default_device() first


@contextmanager
def default_device(spec: str) -> Iterator[None]:
    """Within the block, ``init()`` without a device uses ``spec`` (how the CLI hands ``model.device``
    to a Trainer that calls ``init()`` without one)."""
    _DEFAULT_DEVICE.insert(0, spec)
    try:
        yield
    finally:
        _DEFAULT_DEVICE.remove(spec)


def requested_device(device: str | None = None) -> tuple[str, str]:
    """(device spec, the setting it came from). ``device`` None: the innermost ``default_device()``, else
    ``auto``. The deprecated ``TOOLGYM_DEVICE`` environment variable replaces ``auto`` only."""
    spec, what = (device, "model.device") if device is not None else (
        (_DEFAULT_DEVICE[0], "model.device") if _DEFAULT_DEVICE else ("auto", "model.device"))
    env = os.environ.get("TOOLGYM_DEVICE")
    if env and str(spec).strip().lower() == "auto":
        warnings.warn("TOOLGYM_DEVICE is deprecated: set model.device in the config or pass --device",
                      FutureWarning, stacklevel=3)
        return env, "TOOLGYM_DEVICE (deprecated; use model.device or --device)"
    return spec, what


def init(device: str | None = None) -> DistInfo:
    """Join the process group that torchrun describes (env vars); a single process needs none.

    ``device`` is ``auto | cpu | cuda | cuda:N`` (see :func:`toolgym.devices.resolve_device`): ``auto``
    takes CUDA when available; under torchrun ``auto``/``cuda`` give each rank ``cuda:LOCAL_RANK`` (nccl),
    ``cpu`` gives gloo."""
    from toolgym.devices import resolve_device

    spec, what = requested_device(device)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo(device=resolve_device(spec, what=what, local_rank=None))
    import torch.distributed as dist

    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(spec, what=what, local_rank=local)
    use_cuda = dev.startswith("cuda")
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    if use_cuda:
        torch.cuda.set_device(dev)
    return DistInfo(rank=dist.get_rank(), world=dist.get_world_size(), local_rank=local, device=dev)


def parallel_strategy() -> str:
    """``TOOLGYM_PARALLEL``: ddp (default) or fsdp."""
    return os.environ.get("TOOLGYM_PARALLEL", "ddp")


def wrap_model(model: torch.nn.Module, info: DistInfo, strategy: str | None = None) -> torch.nn.Module:
    """DDP (default) or FSDP2 around ``model``; the model itself when running alone."""
    if not info.enabled:
        return model
    strategy = strategy or parallel_strategy()
    if strategy == "fsdp":
        from torch.distributed.fsdp import fully_shard

        layers = getattr(getattr(model, "model", None), "layers", None) or []
        for layer in layers:
            fully_shard(layer)
        fully_shard(model)
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model, device_ids=[info.local_rank] if info.device.startswith("cuda") else None)


def all_reduce_sum(values: list[float], info: DistInfo) -> list[float]:
    """Sum a few scalars over ranks (token counts, metric sums). The tensor lives on the rank's device: a group
    initialised with nccl has no CPU backend and refuses a CPU tensor ("No backend type associated with device
    type cpu")."""
    if not info.enabled:
        return list(values)
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=info.device)
    dist.all_reduce(t)
    return t.tolist()


def all_gather_objects(obj: Any, info: DistInfo) -> list[Any]:
    if not info.enabled:
        return [obj]
    import torch.distributed as dist

    out: list[Any] = [None] * info.world
    dist.all_gather_object(out, obj)
    return out


def broadcast_model(model: torch.nn.Module, info: DistInfo) -> None:
    """Make every rank hold rank 0's weights (after a warm start done on each rank)."""
    if not info.enabled:
        return
    import torch.distributed as dist

    with torch.no_grad():
        for p in model.state_dict().values():
            dist.broadcast(p, src=0)


def average_grads(model: torch.nn.Module, info: DistInfo) -> None:
    """Mean of gradients over ranks, for steps outside DDP (the SFT warm start)."""
    if not info.enabled:
        return
    import torch.distributed as dist

    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad.div_(info.world)


def barrier(info: DistInfo) -> None:
    if info.enabled:
        import torch.distributed as dist

        dist.barrier()


def shutdown(info: DistInfo) -> None:
    if info.enabled:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


@contextmanager
def full_params_for_decoding(model: torch.nn.Module) -> Iterator[None]:
    """Within the block, an FSDP2 model holds its full parameters on every rank and its forwards issue no
    collectives; the model itself when not sharded. A collective on entry: every rank must enter together.

    Why: decoding runs a different number of forwards on each rank (each stops when its own rows end); a
    sharded forward all-gathers every layer, so the rank with more tokens would wait forever on the other.
    Costs the full weights in memory for the block's duration (the same as a sampler copy, freed after)."""
    if not is_fsdp(model):
        yield
        return
    from torch.distributed.fsdp import FSDPModule

    mods = [m for m in model.modules() if isinstance(m, FSDPModule)]
    for m in mods:  # a forward then keeps what it finds unsharded (no reshard, so no all-gather next time)
        m.set_reshard_after_forward(False, recurse=False)
    for m in mods:
        m.unshard()
    try:
        yield
    finally:
        for m in mods:
            m.reshard()
        for m in mods:  # back to fully_shard's defaults (wrap_model passes none): the root stays unsharded
            m.set_reshard_after_forward(m is not model, recurse=False)


def is_fsdp(model: torch.nn.Module) -> bool:
    """Whether ``model`` (or a submodule) is sharded with FSDP2 ``fully_shard`` (or wrapped by FSDP1)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # pragma: no cover - older torch
        FSDPModule = ()  # noqa: N806
    from torch.distributed.fsdp import FullyShardedDataParallel

    return any(isinstance(m, (FSDPModule, FullyShardedDataParallel)) for m in model.modules())


def full_state_dict(model: torch.nn.Module, *, rank0_only: bool = True) -> dict[str, torch.Tensor]:
    """The unsharded model weights. A collective under FSDP: every rank must call it.

    FSDP: ``get_model_state_dict(full_state_dict=True)``; with ``rank0_only`` also ``cpu_offload=True``,
    so rank 0 gets the full weights on the CPU and the other ranks an empty dict (for saving); without,
    every rank gets them (for pushing weights to each rank's sampler). Anything else: ``state_dict()``."""
    if not is_fsdp(model):
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=rank0_only))


def full_optimizer_state_dict(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer state, unsharded on rank 0 under FSDP (a collective there); ``optimizer.state_dict()``
    otherwise."""
    if not is_fsdp(model):
        return optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(model, optimizer,
                                    options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def load_full_state_dict(model: torch.nn.Module, sd: dict[str, torch.Tensor],
                         optimizer: torch.optim.Optimizer | None = None,
                         optim_sd: dict[str, Any] | None = None) -> None:
    """Load full (unsharded) state dicts, which every rank read from the checkpoint, into an FSDP model
    (each rank keeps its shard) and its optimizer."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    opts = StateDictOptions(full_state_dict=True, strict=False)
    set_model_state_dict(model, sd, options=opts)
    if optimizer is not None and optim_sd is not None:
        set_optimizer_state_dict(model, optimizer, optim_sd, options=opts)
