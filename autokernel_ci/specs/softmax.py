"""softmax over the last dimension (attention scores, LM heads)."""

from __future__ import annotations

import torch

from autokernel_ci.specs.base import (
    Inputs,
    KernelSpec,
    Shape,
    StressCase,
    Tolerance,
    elem_size,
    prod,
    randn,
    row_dims,
)


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def make_inputs(shape: Shape, dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> Inputs:
    # Attention-score-like logits: std 3 so rows are peaked but not one-hot.
    return (randn(row_dims(shape), dtype, device, gen, std=3.0),)


def _large_logits(shape, dtype, device, gen):
    # exp(89) overflows fp32 and exp(11.1) fp16: a kernel without max-subtraction returns inf/NaN.
    return (randn(row_dims(shape), dtype, device, gen, std=2000.0),)


def _masked(shape, dtype, device, gen):
    x = randn(row_dims(shape), torch.float32, device, gen, std=3.0)
    mask = torch.rand(x.shape, generator=gen, device=device) < 0.4
    mask[..., 0] = False  # every row keeps one finite entry, as a causal mask does
    return (x.masked_fill(mask, float("-inf")).to(dtype),)


def _constant_rows(shape, dtype, device, gen):
    rows = randn((*row_dims(shape)[:-1], 1), dtype, device, gen, std=50.0)
    return (rows.expand(*row_dims(shape)).contiguous(),)


def _bytes(shape: Shape, dtype: torch.dtype) -> float:
    return 2.0 * prod(row_dims(shape)) * elem_size(dtype)  # read x once, write y once


SPEC = KernelSpec(
    name="softmax",
    summary="softmax(x) over the last dimension",
    arg_names=("x",),
    reference=reference,
    make_inputs=make_inputs,
    shape_sets={
        "llama7b": ({"M": 8192, "N": 8192},),
        "gpt2": ({"M": 98304, "N": 1024}, {"M": 2048, "N": 50257}),
        "odd": ({"M": 333, "N": 3001}, {"M": 1000, "N": 1000}),
        "edge": ({"M": 1, "N": 1}, {"M": 3, "N": 2}, {"M": 7, "N": 97}, {"M": 2, "N": 65537},
                 {"B": 2, "M": 3, "N": 5}),
        "cpu": ({"M": 16, "N": 128}, {"M": 5, "N": 300}),
    },
    tolerances={
        torch.bfloat16: Tolerance(atol=1e-5, rtol=1.6e-2, rel_l2=5e-3),
        torch.float16: Tolerance(atol=1e-6, rtol=2e-3, rel_l2=1e-3),
        torch.float32: Tolerance(atol=1e-7, rtol=1e-5, rel_l2=1e-5),
    },
    flops=lambda s: 5.0 * prod(row_dims(s)),  # max, sub, exp, sum, div per element
    bytes_moved=_bytes,
    stress_cases=(
        StressCase("large_logits", "logits of magnitude ~2000 overflow exp() without max-subtraction",
                   _large_logits),
        StressCase("masked_rows", "40% of each row is -inf, as in a causal/padding mask", _masked),
        StressCase("constant_rows", "every entry of a row equal: output exactly 1/N", _constant_rows),
    ),
    noncontiguous_args=(0,),
)
