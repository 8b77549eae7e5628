"""A CUDA run in plain fp32 gets TF32 matmuls and one line suggesting bf16; CPU runs and bf16 runs get neither."""

from __future__ import annotations

import pytest
import torch

from toolgym.training.update.cuda_precision import fp32_on_cuda


@pytest.fixture
def matmul_precision():
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    matmul.fp32_precision = "ieee"
    yield matmul
    matmul.fp32_precision = before


def test_fp32_on_cuda_turns_tf32_on_and_says_bf16_once(matmul_precision) -> None:
    line = fp32_on_cuda("cuda:1", "fp32")  # a flag and a string: no GPU needed to set or check them
    assert line is not None and "\n" not in line and "model.dtype: bf16" in line
    assert matmul_precision.fp32_precision == "tf32"


@pytest.mark.parametrize(("device", "dtype"), [("cpu", "fp32"), ("cuda", "bf16"), ("meta", "fp32")])
def test_cpu_and_bf16_runs_are_left_alone(matmul_precision, device, dtype) -> None:
    assert fp32_on_cuda(device, dtype) is None
    assert matmul_precision.fp32_precision == "ieee"
