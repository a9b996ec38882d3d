"""RMSNorm (LLaMA): normalise in fp32, then multiply by the weight."""

from __future__ import annotations

import torch

from autokernel_ci.specs._norms import NORM_SHAPE_SETS
from autokernel_ci.specs._tolerances import ROWWISE
from autokernel_ci.specs.base import (
    Inputs,
    KernelSpec,
    Shape,
    StressCase,
    affine_weight,
    elem_size,
    prod,
    randn,
    row_dims,
)

EPS = 1e-6  # LLaMA's rms_norm_eps


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def eager(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm.forward: normalise in fp32, cast back to the input dtype, then scale."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def _with_weight(x: torch.Tensor, dtype, device, gen):
    return (x, affine_weight(x.shape[-1], dtype, device, gen), EPS)


def make_inputs(shape: Shape, dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> Inputs:
    return _with_weight(randn(row_dims(shape), dtype, device, gen, std=1.5, mean=0.1), dtype, device, gen)


def _tiny(shape, dtype, device, gen):
    # rms ~1e-3 against eps 1e-6: eps must be added to the mean square, not to the rms.
    return _with_weight(randn(row_dims(shape), dtype, device, gen, std=1e-3), dtype, device, gen)


def _large(shape, dtype, device, gen):
    # x^2 overflows fp16 above 256: the mean square must be accumulated in fp32.
    return _with_weight(randn(row_dims(shape), dtype, device, gen, std=1000.0), dtype, device, gen)


def _bytes(shape: Shape, dtype: torch.dtype) -> float:
    return (2.0 * prod(row_dims(shape)) + int(shape["N"])) * elem_size(dtype)  # x, y, weight


SPEC = KernelSpec(
    name="rmsnorm",
    summary="x * rsqrt(mean(x^2) + eps) * weight over the last dimension",
    arg_names=("x", "weight", "eps"),
    reference=reference,
    make_inputs=make_inputs,
    shape_sets=NORM_SHAPE_SETS,
    tolerances=ROWWISE,
    flops=lambda s: 4.0 * prod(row_dims(s)),
    bytes_moved=_bytes,
    stress_cases=(
        StressCase("tiny_values", "rms ~1e-3 against eps 1e-6", _tiny),
        StressCase("large_magnitude", "std 1000: x^2 overflows fp16", _large),
    ),
    noncontiguous_args=(0,),
    eager=eager,
)
