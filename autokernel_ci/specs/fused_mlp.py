"""SwiGLU MLP (LLaMA): (silu(x @ w_gate^T) * (x @ w_up^T)) @ w_down^T."""

from __future__ import annotations

import math

import torch

from autokernel_ci.specs._tolerances import GEMM
from autokernel_ci.specs.base import Inputs, KernelSpec, Shape, StressCase, elem_size, randn


def reference(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    return (torch.nn.functional.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def _weights(shape: Shape, dtype, device, gen, gain: float = 1.0):
    d, f = int(shape["D"]), int(shape["F"])
    # nn.Linear-like init: std 1/sqrt(fan_in) keeps activations O(1) at any width.
    return (
        randn((f, d), dtype, device, gen, std=gain / math.sqrt(d)),
        randn((f, d), dtype, device, gen, std=1 / math.sqrt(d)),
        randn((d, f), dtype, device, gen, std=1 / math.sqrt(f)),
    )


def make_inputs(shape: Shape, dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> Inputs:
    x = randn((int(shape["M"]), int(shape["D"])), dtype, device, gen)
    return (x, *_weights(shape, dtype, device, gen))


def _saturated(shape, dtype, device, gen):
    # Gate pre-activations ~+-20: silu saturates both ways (x*sigmoid(x) -> x and -> 0).
    x = randn((int(shape["M"]), int(shape["D"])), dtype, device, gen)
    w_gate, w_up, w_down = _weights(shape, dtype, device, gen, gain=20.0)
    # w_down scaled by 1/gain keeps outputs O(1), so bf16 intermediates meet the usual tolerance.
    return (x, w_gate, w_up, (w_down.float() / 20.0).to(dtype))


def _bytes(shape: Shape, dtype: torch.dtype) -> float:
    m, d, f = int(shape["M"]), int(shape["D"]), int(shape["F"])
    return float(2 * m * d + 3 * d * f) * elem_size(dtype)


SPEC = KernelSpec(
    name="fused_mlp",
    summary="(silu(x @ w_gate^T) * (x @ w_up^T)) @ w_down^T",
    arg_names=("x", "w_gate", "w_up", "w_down"),
    reference=reference,
    make_inputs=make_inputs,
    shape_sets={
        "llama7b": ({"M": 4096, "D": 4096, "F": 11008},),
        "gpt2": ({"M": 8192, "D": 768, "F": 2048},),
        "odd": ({"M": 257, "D": 320, "F": 864},),
        "edge": ({"M": 1, "D": 16, "F": 32}, {"M": 3, "D": 8, "F": 5}),
        "cpu": ({"M": 32, "D": 64, "F": 96}, {"M": 7, "D": 48, "F": 40}),
    },
    tolerances=GEMM,
    flops=lambda s: 6.0 * int(s["M"]) * int(s["D"]) * int(s["F"]),
    bytes_moved=_bytes,
    stress_cases=(StressCase("saturated_gate", "gate pre-activations ~+-20", _saturated),),
    # The GEMMs may stay on cuBLAS; the win is fusing SiLU*mul (and the intermediate's round trip).
    allowed_calls=("torch.matmul", "torch.mm", "torch.nn.functional.linear", "torch.addmm"),
    extra_allowed_aten=frozenset({"mm", "matmul", "addmm", "linear", "bmm"}),
    reference_dtype=torch.float32,
    primary_metric="TFLOP/s",
)
