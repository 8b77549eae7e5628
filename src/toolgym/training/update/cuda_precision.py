"""Matmul precision for a run on CUDA: TF32 where the weights train in fp32, and one line saying bf16 is faster.

Why: with ``model.dtype: fp32`` every GEMM on a GPU runs in true fp32, about 1/15 of an H100's bf16 rate. TF32
keeps fp32's range and storage with a 10-bit mantissa in the matmul (as bf16 autocast rounds far more), at
several times the speed; ``model.dtype: bf16`` (fp32 master weights, a bf16 autocast forward) is faster still.
"""

from __future__ import annotations

import torch


def enable_tf32_matmul() -> None:
    """fp32 matmuls on CUDA run as TF32 (the newer ``fp32_precision`` switch where torch has it)."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        matmul.fp32_precision = "tf32"
    else:  # pragma: no cover - torch before 2.9
        matmul.allow_tf32 = True


def fp32_on_cuda(device: str, dtype: str) -> str | None:
    """On CUDA with ``model.dtype`` fp32: TF32 matmuls on, and the one-line warning to show; None elsewhere."""
    if torch.device(device).type != "cuda" or dtype != "fp32":
        return None
    enable_tf32_matmul()
    return ("warning: model.dtype is fp32 on CUDA: matmuls run as TF32, still several times slower than bf16; "
            "set model.dtype: bf16 (fp32 master weights, bf16 autocast forward)")
