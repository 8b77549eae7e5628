"""The losses and their metrics on an accelerator (CUDA where present, else the CPU stand-in device of
tests/device_standin.py, which refuses what CUDA refuses: see its docstring for what it cannot catch).

On CPU ``policy_loss`` takes the numba kernel and every tensor shares one device, so nothing else here
would notice a CPU tensor multiplied into device tensors, or ``.numpy()`` of a device tensor: both stopped
every training entry point at its first loss call on a GPU.
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.training.policy_gradient.test_losses import CTPO, GRPO, GSPO, random_batch, reference_loss
from toolgym.training.algorithms.distillation.loss import mopd_loss
from toolgym.training.config import AGGS, RATIOS
from toolgym.training.policy_gradient.loss_metrics import to_floats
from toolgym.training.policy_gradient.losses import finite_rows, mismatch_weight, per_token_loss, policy_loss

pytestmark = pytest.mark.device_standin

CLIPS = {"cumulative": CTPO, "token": GRPO, "sequence": GRPO, "gspo": GSPO}
# a global count as the trainer (float), verl (int) or TRL (a 0-dim tensor, on the device or the CPU) passes it
COUNTS = ["none", "int", "float", "device-tensor", "cpu-tensor"]


def _count(kind: str, value: int, device: str):
    return {"none": None, "int": value, "float": float(value), "device-tensor": torch.tensor(float(value), device=device),
            "cpu-tensor": torch.tensor(float(value))}[kind]


@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("agg", AGGS)
@pytest.mark.parametrize("ratio", RATIOS)
def test_policy_loss_tensor_path_on_the_device(device: str, ratio: str, agg: str, count: str) -> None:
    logp, old, adv, mask = random_batch(7)
    clip = CLIPS[ratio]
    ref = reference_loss(logp.detach(), old, adv, mask, ratio, clip, agg)
    n_tok = int((mask != 0).sum())
    n_seq = int(((mask != 0).sum(1) > 0).sum())
    big = 3 * (n_tok if agg == "token-mean" else n_seq)  # a micro-batch of a larger mini-batch
    kw = {}
    if count != "none":
        kw["global_token_count" if agg == "token-mean" else "global_seq_count"] = _count(count, big, device)
        ref = ref * (n_tok if agg == "token-mean" else n_seq) / big

    x = logp.detach().to(device).requires_grad_(True)
    loss, m = policy_loss(x, old.to(device), adv.to(device), mask.to(device), ratio=ratio, clip=clip, agg=agg,
                          fused=False, **kw)
    loss.backward()
    assert loss.device.type == x.device.type and x.grad is not None and x.grad.device.type == x.device.type
    assert float(loss.detach()) == pytest.approx(float(ref), rel=1e-9, abs=1e-12)
    cpu = logp.detach().clone().requires_grad_(True)
    policy_loss(cpu, old, adv, mask, ratio=ratio, clip=clip, agg=agg, fused=False,
                **{k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()})[0].backward()
    assert torch.allclose(x.grad.cpu(), cpu.grad, rtol=1e-9, atol=1e-12)
    assert all(isinstance(v, float) and math.isfinite(v) for v in m.values()), m
    assert m["tokens"] == n_tok


def test_metrics_stay_on_the_device_until_read(device: str) -> None:
    """``metrics_on_device``: 0-dim device tensors that read back to what the float metrics say (quantiles
    included: the sort-based quantiles must equal torch.quantile's over the policy tokens)."""
    logp, old, adv, mask = random_batch(3, b=6, t=40, spread=0.2)
    _, floats = policy_loss(logp, old, adv, mask, ratio="cumulative", clip=CTPO, fused=False)
    _, on_dev = policy_loss(logp.to(device), old.to(device), adv.to(device), mask.to(device), ratio="cumulative",
                            clip=CTPO, fused=False, metrics_on_device=True)
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 and v.device.type == torch.device(device).type
               for v in on_dev.values())
    read = to_floats(on_dev)
    assert read.keys() == floats.keys()
    for k, v in floats.items():
        assert read[k] == pytest.approx(v, rel=1e-12, abs=1e-15), k
    rho = torch.exp(torch.cumsum(mask * (logp - old), 1))[mask.bool()]
    assert read["ratio_p90"] == pytest.approx(float(torch.quantile(rho, 0.9)), rel=1e-12)


def test_a_call_without_policy_tokens_logs_no_ratio_statistics(device: str) -> None:
    logp, old, adv, mask = random_batch(4)
    z = torch.zeros_like(mask)
    loss, m = policy_loss(logp.to(device), old.to(device), adv.to(device), z.to(device), fused=False)
    assert float(loss) == 0.0 and m["tokens"] == 0.0 and "ratio_mean" not in m and "ratio_p50" not in m


def test_helpers_on_the_device(device: str) -> None:
    logp, old, adv, mask = random_batch(5)
    d = {k: v.to(device) for k, v in {"logp": logp, "old": old, "adv": adv, "mask": mask}.items()}
    w = mismatch_weight(d["old"], d["logp"], d["mask"])
    assert torch.allclose(w.cpu(), mismatch_weight(old, logp, mask))
    ok = finite_rows(d["mask"], d["logp"], d["old"], d["adv"])
    assert ok.cpu().tolist() == [True] * len(ok)
    terms = per_token_loss(d["logp"], d["old"], d["adv"], d["mask"], ratio="cumulative", clip=CTPO)
    assert torch.allclose(terms.loss.cpu(), per_token_loss(logp, old, adv, mask, "cumulative", CTPO).loss)
    loss, m = policy_loss(d["logp"], d["old"], d["adv"], d["mask"], seq_weight=w, fused=False)
    assert math.isfinite(float(loss)) and m["tokens"] > 0


def test_mopd_loss_on_the_device(device: str) -> None:
    g = torch.Generator().manual_seed(0)
    div = torch.rand(3, 6, generator=g)
    mask = (torch.rand(3, 6, generator=g) > 0.3).float()
    seq = torch.tensor([1.0, 0.0, 1.0])
    logp, old = -torch.rand(3, 6, generator=g), -torch.rand(3, 6, generator=g)
    ref, ref_m = mopd_loss(div, mask, seq, logp=logp, old_logp=old, trainer_old_logp=old, rollout_logp=logp)
    dv = {k: v.to(device) for k, v in {"div": div, "mask": mask, "seq": seq, "logp": logp, "old": old}.items()}
    loss, m = mopd_loss(dv["div"], dv["mask"], dv["seq"], logp=dv["logp"], old_logp=dv["old"],
                        trainer_old_logp=dv["old"], rollout_logp=dv["logp"], metrics_on_device=True)
    assert float(loss) == pytest.approx(float(ref), rel=1e-6)
    assert all(v.device.type == torch.device(device).type for v in m.values())
    assert to_floats(m) == pytest.approx(ref_m, rel=1e-6)
