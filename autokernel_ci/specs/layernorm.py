"""LayerNorm over the last dimension with affine weight and bias (GPT-2, BERT)."""

from __future__ import annotations

import torch

from autokernel_ci.specs._norms import NORM_SHAPE_SETS
from autokernel_ci.specs._tolerances import ROWWISE
from autokernel_ci.specs.base import (
    Inputs,
    KernelSpec,
    Shape,
    StressCase,
    Tolerance,
    affine_weight,
    elem_size,
    prod,
    randn,
    row_dims,
)

EPS = 1e-5  # nn.LayerNorm's default


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def _with_params(x: torch.Tensor, dtype, device, gen):
    n = x.shape[-1]
    bias = randn((n,), dtype, device, gen, std=0.1)
    return (x, affine_weight(n, dtype, device, gen), bias, EPS)


def make_inputs(shape: Shape, dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> Inputs:
    # Residual-stream-like activations: non-zero mean and spread per row.
    return _with_params(randn(row_dims(shape), dtype, device, gen, std=2.0, mean=0.5), dtype, device, gen)


def _large_mean(shape, dtype, device, gen):
    # var = E[x^2] - E[x]^2 in fp32 loses ~all digits at mean 1000, std 1: a two-pass or Welford
    # variance is needed.
    return _with_params(randn(row_dims(shape), dtype, device, gen, std=1.0, mean=1000.0), dtype, device, gen)


# fp32 bound of the large_mean case. The output (x - mean) / std is conditioned by |mean| / std = 1000:
# an fp32 mean is off by a few ulp(1000) = 6.1e-5, and that error reaches every output element.
# Measured against the float64 reference on CPU (cpu/odd/llama7b/gpt2 shapes, seeds 0-2):
#   PyTorch's fp32 F.layer_norm (the eager baseline)        max |err| 1.0e-4..2.5e-4, rel_l2 3.1e-5..3.6e-5
#   two-pass in fp32, no shift                              max |err| 1.5e-4..3.8e-4, rel_l2 4.0e-5..6.6e-5
#   two-pass shifted by x[0] (the Triton starter)           max |err| <= 1.5e-6
#   chunk-sequential Welford in fp32                        max |err| <= 1.6e-3,       rel_l2 <= 2.8e-4
#   single-pass E[x^2] - E[x]^2 (what the case must reject)  max |err| 0.24..1.5,        rel_l2 4e-2..6e-2
# ROWWISE fp32 (1e-5) rejects eager itself, up to ~20x over; this bound accepts every honest fp32 algorithm
# above and still rejects the single-pass variance by 80x (rel_l2) to 100x (elementwise).
LARGE_MEAN_FP32 = Tolerance(atol=2e-3, rtol=2e-3, rel_l2=5e-4)


def _tiny_variance(shape, dtype, device, gen):
    return _with_params(randn(row_dims(shape), dtype, device, gen, std=1e-3), dtype, device, gen)


def _large_magnitude(shape, dtype, device, gen):
    # x^2 overflows fp16 above 256: the statistics must be accumulated in fp32.
    return _with_params(randn(row_dims(shape), dtype, device, gen, std=1000.0), dtype, device, gen)


def _bytes(shape: Shape, dtype: torch.dtype) -> float:
    n = int(shape["N"])
    return (2.0 * prod(row_dims(shape)) + 2 * n) * elem_size(dtype)  # x, y, weight, bias


SPEC = KernelSpec(
    name="layernorm",
    summary="layer_norm(x, weight, bias, eps) over the last dimension",
    arg_names=("x", "weight", "bias", "eps"),
    reference=reference,
    make_inputs=make_inputs,
    shape_sets=NORM_SHAPE_SETS,
    tolerances=ROWWISE,
    flops=lambda s: 8.0 * prod(row_dims(s)),
    bytes_moved=_bytes,
    stress_cases=(
        StressCase("large_mean", "mean 1000, std 1: single-pass E[x^2]-E[x]^2 variance cancels", _large_mean,
                   tolerances={torch.float32: LARGE_MEAN_FP32}),
        StressCase("tiny_variance", "std 1e-3, comparable to eps", _tiny_variance),
        StressCase("large_magnitude", "std 1000: x^2 overflows fp16", _large_magnitude),
    ),
    noncontiguous_args=(0,),
)
