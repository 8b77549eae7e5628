"""numba is optional (the `cpu` extra): without it toolgym imports, trains through the tensor path, and
policy_loss gives the kernel's value."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from toolgym.training.policy_gradient import fused_loss
from toolgym.training.policy_gradient.losses import policy_loss

pytestmark = pytest.mark.slow  # measured over 1 s each (the fast tier leaves them out)

_INPUTS = """
import torch
g = torch.Generator().manual_seed(3)
old = -torch.rand(5, 40, generator=g, dtype=torch.float64) * 3
logp = (old + torch.randn(5, 40, generator=g, dtype=torch.float64) * 0.3).requires_grad_(True)
mask = (torch.rand(5, 40, generator=g) > 0.3).double()
adv = torch.randn(5, generator=g, dtype=torch.float64)
"""

# a GPU-only install: `import numba` fails (None in sys.modules makes the import raise ImportError)
_WITHOUT_NUMBA = """
import sys, json
sys.modules["numba"] = None
from toolgym.training.policy_gradient import fused_loss
from toolgym.training.policy_gradient.losses import policy_loss
""" + _INPUTS + """
loss, _ = policy_loss(logp, old, adv, mask, ratio="cumulative", fused=True)
loss.backward()
print(json.dumps({"enabled": fused_loss.enabled(), "loss": loss.item(), "grad": logp.grad.flatten().tolist(),
                  "numba_loaded": "numba" in sys.modules and sys.modules["numba"] is not None}))
"""


def test_without_numba_the_tensor_path_gives_the_kernels_result():
    assert fused_loss.enabled()  # here (and in CI) the kernel is installed: the reference below uses it
    ns: dict = {}
    exec(_INPUTS, ns)
    loss, _ = policy_loss(ns["logp"], ns["old"], ns["adv"], ns["mask"], ratio="cumulative", fused=True)
    loss.backward()
    res = subprocess.run([sys.executable, "-c", _WITHOUT_NUMBA], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["enabled"] is False and out["numba_loaded"] is False
    assert abs(out["loss"] - loss.item()) <= 1e-12 * max(1.0, abs(loss.item()))
    assert torch.allclose(torch.tensor(out["grad"], dtype=torch.float64), ns["logp"].grad.flatten(),
                          rtol=1e-12, atol=1e-12)
