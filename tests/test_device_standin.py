"""The CPU stand-in device refuses what CUDA refuses and computes what the CPU computes: without these, a
stand-in that stopped refusing would let every ``device_standin`` test pass on code that fails on a GPU."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

from tests.device_standin import STANDIN, DeviceMixError, StandinTensor, standin_mode


def test_mixing_with_a_cpu_tensor_is_refused_but_cpu_scalars_and_indices_are_not() -> None:
    with standin_mode():
        x = torch.arange(6.0, device=STANDIN).reshape(2, 3)
        with pytest.raises(DeviceMixError, match="Expected all tensors to be on the same device"):
            x * torch.ones(2, 3)
        with pytest.raises(DeviceMixError):
            torch.where(x > 1, torch.zeros(2, 3), x)
        with pytest.raises(DeviceMixError):  # a CPU tensor indexed by device indices
            torch.ones(4)[torch.tensor([0, 1], device=STANDIN)]
        assert (x * torch.tensor(2.0)).tolist() == [[0, 2, 4], [6, 8, 10]]  # a CPU 0-dim scalar is fine on CUDA too
        assert x[torch.tensor([1])].tolist() == [[3, 4, 5]]  # CPU indices into a device tensor are fine too
        assert torch.where(x > 2, x, 0.0).tolist() == [[0, 0, 0], [3, 4, 5]]


def test_host_reads() -> None:
    with standin_mode():
        x = torch.tensor([1.5, 2.5], device=STANDIN)
        with pytest.raises(TypeError, match="can't convert meta device type tensor to numpy"):
            x.numpy()
        with pytest.raises(TypeError):
            np.asarray(x)
        assert x.tolist() == [1.5, 2.5] and float(x.sum()) == 4.0 and bool((x > 2).any())
        assert type(x.cpu()) is torch.Tensor and x.cpu().numpy().tolist() == [1.5, 2.5]


def test_factories_modules_autograd_and_threads_compute_real_values() -> None:
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 2)
    data = torch.randn(4, 3)
    want = lin(data).sum()
    want.backward()
    with standin_mode():
        dev = torch.nn.Linear(3, 2)
        dev.load_state_dict(lin.state_dict())
        dev.to(STANDIN)
        assert isinstance(dev.weight, StandinTensor) and isinstance(dev.weight, torch.nn.Parameter)
        got = dev(data.to(STANDIN)).sum()
        got.backward()
        assert float(got.detach()) == pytest.approx(float(want.detach()))
        assert torch.allclose(dev.weight.grad.cpu(), lin.weight.grad)
        seen = []
        t = threading.Thread(target=lambda: seen.append(type(torch.zeros(2, device=STANDIN))))
        t.start()
        t.join()
        assert seen == [StandinTensor]  # a thread started inside the block is on the stand-in too


def test_tied_weights_stay_tied_when_a_module_moves() -> None:
    emb = torch.nn.Embedding(5, 3)
    head = torch.nn.Linear(3, 5, bias=False)
    head.weight = emb.weight
    model = torch.nn.ModuleDict({"emb": emb, "head": head})
    with standin_mode():
        model.to(STANDIN)
        assert model["emb"].weight is model["head"].weight


def test_the_two_rank_form_refuses_a_cpu_tensor_in_a_collective_as_nccl_does(tmp_path) -> None:
    import torch.distributed as dist

    from tests.device_standin_ranks import NCCL_REFUSAL, nccl_rules

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        with standin_mode(), nccl_rules():
            with pytest.raises(RuntimeError, match=NCCL_REFUSAL):
                dist.all_reduce(torch.tensor([1.0, 2.0]))
            with pytest.raises(RuntimeError, match=NCCL_REFUSAL):  # a list argument is searched too
                dist.all_gather([torch.zeros(2, device=STANDIN)], torch.zeros(2))
            if hasattr(dist, "all_gather_single"):  # FSDP2's all-gather (torch 2.13) is checked too
                with pytest.raises(RuntimeError, match=NCCL_REFUSAL):
                    dist.all_gather_single(torch.zeros(2, device=STANDIN), torch.zeros(2))
            t = torch.tensor([1.0, 2.0], device=STANDIN)
            dist.all_reduce(t)
            assert isinstance(t, StandinTensor) and t.tolist() == [1.0, 2.0]
            got = [None]
            dist.all_gather_object(got, {"rank": 0})  # object collectives pass: NCCL puts them on the device
            assert got == [{"rank": 0}]
        dist.all_reduce(torch.tensor([1.0]))  # outside the block gloo takes CPU tensors again
    finally:
        dist.destroy_process_group()
