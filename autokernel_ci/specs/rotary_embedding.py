"""Rotary position embedding (RoPE), rotate-half convention (LLaMA, GPT-NeoX)."""

from __future__ import annotations

import torch

from autokernel_ci.specs._tolerances import ROWWISE
from autokernel_ci.specs.base import Inputs, KernelSpec, Shape, StressCase, Tolerance, elem_size, randn

THETA = 10000.0


def reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def cos_sin(seq: int, dim: int, dtype: torch.dtype, device: torch.device,
            offset: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's tables: angle = position * theta^(-2i/D), computed in fp64 then cast."""
    inv_freq = THETA ** (-torch.arange(0, dim, 2, dtype=torch.float64, device=device) / dim)
    angles = torch.outer(torch.arange(offset, offset + seq, dtype=torch.float64, device=device), inv_freq)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def _inputs(shape: Shape, dtype, device, gen, std: float = 1.0, offset: int = 0):
    b, h, s, d = (int(shape[n]) for n in ("B", "H", "S", "D"))
    return (randn((b, h, s, d), dtype, device, gen, std=std), *cos_sin(s, d, dtype, device, offset))


def make_inputs(shape: Shape, dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> Inputs:
    return _inputs(shape, dtype, device, gen)


def _far_positions(shape, dtype, device, gen):
    return _inputs(shape, dtype, device, gen, offset=1_000_000)  # long-context positions


def _large(shape, dtype, device, gen):
    return _inputs(shape, dtype, device, gen, std=1000.0)


# fp32 bound of the large_magnitude case. An output x1*cos - x2*sin of two products ~1000 that nearly
# cancel carries the products' rounding, a few ulp(1000) = 6.1e-5, whatever its own size: PyTorch's
# fp32 eager rotate-half measured max |err| 1.3e-4..4.3e-4 against the float64 reference (cpu and odd
# shapes, seeds 0-2), failing ROWWISE's atol 1e-5. atol 1e-3 (2.3x margin) scales that by the input;
# rel_l2 stays at ROWWISE's 1e-5 (eager: 3.7e-8), which still rejects bf16-precision compute (~4e-3).
LARGE_MAGNITUDE_FP32 = Tolerance(atol=1e-3, rtol=1e-5, rel_l2=1e-5)


def _bytes(shape: Shape, dtype: torch.dtype) -> float:
    b, h, s, d = (int(shape[n]) for n in ("B", "H", "S", "D"))
    return float(2 * b * h * s * d + s * d) * elem_size(dtype)  # x, out, cos and sin (S x D/2 each)


SPEC = KernelSpec(
    name="rotary_embedding",
    summary="rotate-half RoPE: [x1*cos - x2*sin, x2*cos + x1*sin]",
    arg_names=("x", "cos", "sin"),
    reference=reference,
    make_inputs=make_inputs,
    shape_sets={
        "llama7b": ({"B": 2, "H": 32, "S": 4096, "D": 128},),
        "gpt2": ({"B": 8, "H": 12, "S": 1024, "D": 64},),
        "odd": ({"B": 1, "H": 3, "S": 333, "D": 96},),
        "edge": ({"B": 1, "H": 1, "S": 1, "D": 2}, {"B": 1, "H": 1, "S": 7, "D": 6}),
        "cpu": ({"B": 1, "H": 2, "S": 16, "D": 32}, {"B": 2, "H": 3, "S": 5, "D": 8}),
    },
    tolerances=ROWWISE,
    flops=lambda s: 3.0 * int(s["B"]) * int(s["H"]) * int(s["S"]) * int(s["D"]),
    bytes_moved=_bytes,
    stress_cases=(
        StressCase("far_positions", "positions around 1e6 (long context)", _far_positions),
        StressCase("large_magnitude", "x with std 1000", _large, tolerances={torch.float32: LARGE_MAGNITUDE_FP32}),
    ),
    noncontiguous_args=(0,),  # q from a [B,S,H,D] projection viewed as [B,H,S,D]
)
