"""A stand-in for a GPU on CPU-only machines: tensors that live on a non-CPU device, refuse what CUDA
refuses, and still compute real values.

CI has no GPU, so without this every training test runs with all tensors on the CPU, where mixing
devices and ``.numpy()`` of a device tensor cannot fail. Here a device tensor is a wrapper subclass
(``__torch_dispatch__``) that reports device ``meta`` and carries a real CPU tensor inside. ``meta``
because torch has a no-op device guard for it, so autograd, optimizers and ``.item()`` work as they do
on a real device; a CPU-only torch cannot host a tensor that says ``cuda``.

What it refuses, as CUDA does:
- an op that mixes a device tensor with a CPU tensor of one or more dimensions (CPU 0-dim scalars are
  allowed, as CUDA allows them; CPU index tensors may index a device tensor);
- ``.numpy()`` / ``np.asarray`` of a device tensor;
- a real ``meta`` tensor (created outside :func:`standin_mode`) meeting a stand-in tensor.

``torch.inference_mode`` runs as ``no_grad`` inside the block (see :class:`_NoGradInference`), and autocast is
off on the stand-in (torch has none for its device type).

What it cannot catch (these run on real CUDA in ``scripts/gpu_check.sh``): code that branches on
``device.type == "cuda"`` (autocast, memory statistics, ``empty_cache``, CUDA graphs), kernel numerics
and bf16 behaviour, asynchronous errors and stream ordering, memory limits, NCCL itself, and ops
that have a CPU kernel but no CUDA one. Collectives handed a tensor off the group's device (which NCCL refuses)
are caught by the two-rank form, tests/device_standin_ranks.py.

Use: ``with standin_mode(): model.to(STANDIN); ...`` (factories with ``device="meta"`` make stand-in
tensors inside the block, in this thread and in threads started inside it, such as a sampler's batch thread:
torch's modes are per thread). The ``device`` fixture (tests/conftest.py) yields ``"cuda"`` where a GPU exists,
else this stand-in.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

STANDIN = "meta"  # the device string code under test is given (see switch_device for FSDP's form)
_DEVICE = torch.device(STANDIN)


def switch_device(device_type: str, index: int | None = None) -> None:
    """Make ``device_type`` the stand-in's device in this process (read at call time everywhere here).

    Why: FSDP2 takes ``meta`` parameters for deferred initialisation and asks the device for streams, so its
    two-rank form (tests/device_standin_fsdp.py) registers a ``privateuse1`` device and switches to it."""
    global STANDIN, _DEVICE
    STANDIN = device_type
    _DEVICE = torch.device(device_type) if index is None else torch.device(device_type, index)

# ops that move data between devices, or accept CPU indices for a device tensor (CUDA allows both)
_CROSS_DEVICE_OK = {
    torch.ops.aten._to_copy.default,
    torch.ops.aten.copy_.default,
    torch.ops.aten.index.Tensor,
    torch.ops.aten.index_put_.default,
    torch.ops.aten.index_put.default,
    torch.ops.aten._index_put_impl_.default,
    torch.ops.aten._local_scalar_dense.default,
}


class DeviceMixError(RuntimeError):
    """What CUDA raises when an op mixes devices."""


class StandinTensor(torch.Tensor):
    """A device tensor: reports ``meta``, computes on the CPU tensor it wraps."""

    inner: torch.Tensor
    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> StandinTensor:
        if inner.device.type != "cpu":
            raise DeviceMixError(f"a stand-in tensor must wrap a CPU tensor; got one on {inner.device}")
        r = torch.Tensor._make_wrapper_subclass(cls, inner.shape, strides=inner.stride(), dtype=inner.dtype,
                                                device=_DEVICE, requires_grad=inner.requires_grad,
                                                layout=inner.layout, storage_offset=inner.storage_offset())
        r.inner = inner
        return r

    def __repr__(self) -> str:  # type: ignore[override]
        return f"StandinTensor({self.inner!r})"

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if _HOST_READS:
            _note_host_read(func, args, kwargs)
        if func not in _CROSS_DEVICE_OK:
            _refuse_mixed(func, args, kwargs)
        elif func is torch.ops.aten.index.Tensor and not isinstance(args[0], StandinTensor):
            _refuse_mixed(func, args, kwargs)  # a CPU tensor cannot be indexed by device indices
        target = kwargs.get("device")
        if func is torch.ops.aten._to_copy.default:
            to_cpu = target is not None and torch.device(target).type == "cpu"
            kw = {**kwargs, "device": torch.device("cpu")}
            out = func(*tree_map(_unwrap, args), **tree_map(_unwrap, kw))
            return out if to_cpu else StandinTensor(out)
        out = func(*tree_map(_to_host, args), **tree_map(_to_host, kwargs))
        if func is torch.ops.aten.copy_.default and not isinstance(args[0], StandinTensor):
            return args[0]  # a device -> CPU copy: the destination stays a CPU tensor
        if func is torch.ops.aten._local_scalar_dense.default:
            return out
        return tree_map(_wrap, out)


_HOST_READS: list[list[str]] = []  # the innermost count_host_reads() block's list; empty: not counting
# ops that make the host wait for the device on CUDA (a value read, a device-to-host copy, a data-dependent shape)
_SYNCING = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.nonzero.default,
            torch.ops.aten.masked_select.default, torch.ops.aten._unique2.default}


def _note_host_read(func: Any, args: tuple, kwargs: dict) -> None:
    """Record a syncing op on a stand-in tensor, named by the first toolgym frame that led to it."""
    syncs = func in _SYNCING
    if func is torch.ops.aten._to_copy.default:
        target = kwargs.get("device")
        syncs = target is not None and torch.device(target).type == "cpu"
    elif func in (torch.ops.aten.index.Tensor, torch.ops.aten.index_put_.default, torch.ops.aten.index_put.default):
        syncs = any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in (args[1] or []))
    if syncs:
        _HOST_READS[-1].append(f"{func.__name__} at {_toolgym_frame()}")


def _toolgym_frame() -> str:
    """``file:line`` of the innermost frame outside torch and this module: toolgym's as
    ``toolgym/training/x.py:N``, a library's (transformers) with its package path."""
    import traceback

    for frame in reversed(traceback.extract_stack()):
        name = frame.filename
        if name == __file__ or "/torch/" in name or "/contextlib.py" in name:
            continue
        if "/src/toolgym/" in name:
            return f"toolgym/{name.rsplit('/src/toolgym/', 1)[1]}:{frame.lineno}"
        return f"{name.rsplit('/site-packages/', 1)[-1]}:{frame.lineno}"
    return "unknown"


@contextlib.contextmanager
def count_host_reads() -> Iterator[list[str]]:
    """An instrument (not a mock): within the block, every op on a stand-in tensor that would make the host wait
    for a CUDA device (``.item()``, ``float()``/``bool()``, ``.tolist()``, ``.cpu()``, ``nonzero``, boolean
    indexing) is appended to the yielded list as ``"op at file:line"`` (the toolgym frame that asked)."""
    reads: list[str] = []
    _HOST_READS.append(reads)
    try:
        yield reads
    finally:
        _HOST_READS.remove(reads)


def _unwrap(x: Any) -> Any:
    return x.inner if isinstance(x, StandinTensor) else x


def _to_host(x: Any) -> Any:
    """A stand-in tensor's CPU tensor, the stand-in device as the CPU, anything else as it is."""
    if isinstance(x, StandinTensor):
        return x.inner
    if isinstance(x, torch.device) and x.type == STANDIN:
        return torch.device("cpu")
    return x


def _wrap(x: Any) -> Any:
    return StandinTensor(x) if isinstance(x, torch.Tensor) and not isinstance(x, StandinTensor) else x


def _refuse_mixed(func: Any, args: tuple, kwargs: dict) -> None:
    flat, _ = tree_flatten((args, kwargs))
    tensors = [t for t in flat if isinstance(t, torch.Tensor)]
    if not any(isinstance(t, StandinTensor) for t in tensors):
        return
    for t in tensors:
        if isinstance(t, StandinTensor):
            continue
        if t.device.type == "meta":
            raise DeviceMixError(f"{func}: a real meta tensor (made outside standin_mode) met a device tensor")
        if t.device.type == "cpu" and t.dim() > 0:
            raise DeviceMixError(
                f"Expected all tensors to be on the same device, but found at least two devices, {STANDIN} and cpu! "
                f"({func}, a CPU tensor of shape {tuple(t.shape)})")


def _to_numpy_refused(*_: Any, **__: Any) -> Any:
    raise TypeError(f"can't convert {STANDIN} device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
                    "to host memory first.")


def _is_standin_device(device: Any) -> bool:
    if device is None:
        return False
    try:
        return torch.device(device).type == STANDIN
    except (TypeError, RuntimeError):
        return False


class _Factories(TorchDispatchMode):
    """Ops that create a tensor on the stand-in device from no stand-in input (factories, ``.to("meta")`` of a
    CPU tensor, the scalars torch wraps inside composite ops) make stand-in tensors with real values."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        flat, _ = tree_flatten((args, kwargs))
        if any(_is_standin_device(a) for a in flat if isinstance(a, torch.device)) and \
                not any(isinstance(t, StandinTensor) for t in flat):
            return tree_map(_wrap, func(*tree_map(_to_host, args), **tree_map(_to_host, kwargs)))
        out = func(*args, **kwargs)
        flat, _ = tree_flatten(out)
        if any(type(t) is torch.Tensor and t.device.type == STANDIN for t in flat):
            raise DeviceMixError(f"{func} made a real meta tensor inside standin_mode (a stand-in gap: teach _Factories)")
        return out


class _HostReads(TorchFunctionMode):
    """``.numpy()`` of a device tensor is refused; ``.tolist()`` reads its values (as on CUDA); ``torch.tensor``
    and ``torch.as_tensor`` with ``device="meta"`` (which build their tensor below the dispatcher) make stand-ins."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        this = args[0] if args else None
        if isinstance(this, StandinTensor):
            name = getattr(func, "__name__", "")
            if name in ("numpy", "__array__"):
                _to_numpy_refused()
            if name == "tolist":
                if _HOST_READS:
                    _HOST_READS[-1].append(f"tolist at {_toolgym_frame()}")
                return this.inner.tolist()
        if _is_standin_device(kwargs.get("device")) and not any(isinstance(a, StandinTensor) for a in args):
            return tree_map(_wrap, func(*args, **{**kwargs, "device": "cpu"}))
        out = func(*args, **kwargs)
        flat, _ = tree_flatten(out)
        if any(type(t) is torch.Tensor and t.device.type == STANDIN for t in flat):
            raise DeviceMixError(f"{func} made a real meta tensor inside standin_mode (a stand-in gap)")
        return out


class _NoGradInference(torch.no_grad):
    """``torch.inference_mode`` inside the block: wrapper tensors cannot be inference tensors (a view of one
    fails to share its version counter), so it runs as ``no_grad``, which computes the same values."""

    def __init__(self, mode: bool = True) -> None:
        super().__init__()


def _autocast_off_on_standin(original: Any) -> Any:
    """``torch.is_autocast_enabled("meta")`` raises (no autocast for that device type): on the stand-in it is off."""

    def is_autocast_enabled(*args: Any) -> bool:
        if args and isinstance(args[0], str) and args[0] == STANDIN:
            return False
        return bool(original(*args))

    return is_autocast_enabled


@contextlib.contextmanager
def standin_mode() -> Iterator[None]:
    """Within the block, ``device="meta"`` means the stand-in device (see the module docstring)."""
    swap = torch.__future__.get_swap_module_params_on_conversion()
    # module.to() then swaps each parameter in place (as set_data does for a real device) instead of making new
    # Parameters, which would untie tied weights (an LM head sharing the embedding)
    torch.__future__.set_swap_module_params_on_conversion(True)
    bootstrap = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]

    def bootstrap_in_mode(thread: threading.Thread) -> None:
        with _HostReads(), _Factories():
            bootstrap(thread)

    threading.Thread._bootstrap_inner = bootstrap_in_mode  # type: ignore[attr-defined]
    inference_mode = torch.inference_mode
    torch.inference_mode = _NoGradInference  # type: ignore[assignment,misc]
    autocast_enabled = torch.is_autocast_enabled
    torch.is_autocast_enabled = _autocast_off_on_standin(autocast_enabled)  # type: ignore[assignment]
    try:
        with _HostReads(), _Factories():
            yield
    finally:
        torch.is_autocast_enabled = autocast_enabled  # type: ignore[assignment]
        torch.inference_mode = inference_mode  # type: ignore[misc]
        threading.Thread._bootstrap_inner = bootstrap  # type: ignore[attr-defined]
        torch.__future__.set_swap_module_params_on_conversion(swap)


def on_device(t: torch.Tensor) -> bool:
    """True for a tensor on the device under test (the stand-in or CUDA)."""
    return isinstance(t, StandinTensor) or t.device.type == "cuda"
