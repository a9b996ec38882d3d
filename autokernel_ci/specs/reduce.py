"""Sum over the last dimension with fp32 accumulation."""

from __future__ import annotations

import torch

from autokernel_ci.specs.base import Inputs, KernelSpec, Shape, StressCase, Tolerance, elem_size, prod, randn, row_dims


def reference(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=-1)


def make_inputs(shape: Shape, dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> Inputs:
    return (randn(row_dims(shape), dtype, device, gen, std=1.0, mean=0.1),)


def _cancellation(shape, dtype, device, gen):
    # Large values of both signs around a small signal: a low-precision accumulator loses it.
    big = randn(row_dims(shape), torch.float32, device, gen, std=100.0)
    return (big.to(dtype),)


def _bytes(shape: Shape, dtype: torch.dtype) -> float:
    n = int(shape["N"])
    return float(prod(row_dims(shape))) * elem_size(dtype) * (1 + 1 / n)  # x read once, sums written


SPEC = KernelSpec(
    name="reduce",
    summary="x.sum(-1) with fp32 accumulation, output in x.dtype",
    arg_names=("x",),
    reference=reference,
    make_inputs=make_inputs,
    shape_sets={
        "llama7b": ({"M": 8192, "N": 8192},),
        "gpt2": ({"M": 8192, "N": 768},),
        "odd": ({"M": 1000, "N": 999},),
        "edge": ({"M": 1, "N": 1}, {"M": 3, "N": 65537}, {"B": 2, "M": 3, "N": 5}),
        "cpu": ({"M": 16, "N": 200}, {"M": 5, "N": 33}),
    },
    tolerances={
        # Sums are O(sqrt(N)) large; atol covers sums that land near zero.
        torch.bfloat16: Tolerance(atol=5e-2, rtol=1.6e-2, rel_l2=5e-3),
        torch.float16: Tolerance(atol=1e-2, rtol=2e-3, rel_l2=1e-3),
        torch.float32: Tolerance(atol=1e-3, rtol=1e-5, rel_l2=1e-5),
    },
    flops=lambda s: float(prod(row_dims(s))),
    bytes_moved=_bytes,
    stress_cases=(StressCase("cancellation", "std 100 values of both signs", _cancellation),),
    noncontiguous_args=(0,),
)
