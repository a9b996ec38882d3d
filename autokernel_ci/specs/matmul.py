"""Dense matmul a[M,K] @ b[K,N] (the projections of every transformer)."""

from __future__ import annotations

import math

import torch

from autokernel_ci.specs._tolerances import GEMM
from autokernel_ci.specs.base import Inputs, KernelSpec, Shape, StressCase, elem_size, randn


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a @ b


def make_inputs(shape: Shape, dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> Inputs:
    m, k, n = int(shape["M"]), int(shape["K"]), int(shape["N"])
    # b scaled like an initialised weight (std 1/sqrt(K)) so outputs are O(1) at any K.
    return (randn((m, k), dtype, device, gen), randn((k, n), dtype, device, gen, std=1 / math.sqrt(k)))


def _large(shape, dtype, device, gen):
    m, k, n = int(shape["M"]), int(shape["K"]), int(shape["N"])
    # Outputs ~3e4: beyond what an fp16 accumulator keeps exact, inside fp16's range (65504).
    return (randn((m, k), dtype, device, gen, std=30.0), randn((k, n), dtype, device, gen, std=30 / math.sqrt(k)))


def _bytes(shape: Shape, dtype: torch.dtype) -> float:
    m, k, n = int(shape["M"]), int(shape["K"]), int(shape["N"])
    return float(m * k + k * n + m * n) * elem_size(dtype)


SPEC = KernelSpec(
    name="matmul",
    summary="a @ b for a[M,K], b[K,N]",
    arg_names=("a", "b"),
    reference=reference,
    make_inputs=make_inputs,
    shape_sets={
        "llama7b": ({"M": 4096, "K": 4096, "N": 11008}, {"M": 4096, "K": 11008, "N": 4096}),
        "gpt2": ({"M": 8192, "K": 768, "N": 3072},),
        "odd": ({"M": 1000, "K": 777, "N": 1023}, {"M": 333, "K": 129, "N": 65}),
        "edge": ({"M": 1, "K": 17, "N": 31}, {"M": 7, "K": 1, "N": 13}, {"M": 1, "K": 1, "N": 1}),
        "cpu": ({"M": 64, "K": 96, "N": 80}, {"M": 33, "K": 40, "N": 17}),
    },
    tolerances=GEMM,
    flops=lambda s: 2.0 * int(s["M"]) * int(s["K"]) * int(s["N"]),
    bytes_moved=_bytes,
    stress_cases=(StressCase("large_magnitude", "outputs ~3e4 need fp32 accumulation", _large),),
    reference_dtype=torch.float32,  # fp64 GEMMs are slow; fp32 is exact enough for these tolerances
    noncontiguous_args=(0, 1),  # b is often a transposed nn.Linear weight
    primary_metric="TFLOP/s",
)
