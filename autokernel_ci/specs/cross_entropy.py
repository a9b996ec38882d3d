"""Cross entropy over a large vocabulary, mean over rows, ignore_index=-100 rows skipped."""

from __future__ import annotations

import torch

from autokernel_ci.specs.base import Inputs, KernelSpec, Shape, StressCase, Tolerance, elem_size, randn

IGNORE_INDEX = -100


def reference(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX).float()


def eager(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """What a training loop calls: the loss comes back in the logits' dtype (a bf16 scalar for bf16)."""
    return torch.nn.functional.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX)


def _targets(m: int, v: int, device, gen) -> torch.Tensor:
    t = torch.randint(0, v, (m,), generator=gen, device=device)
    ignored = torch.rand((m,), generator=gen, device=device) < 0.1  # padding tokens
    ignored[0] = False  # the mean needs at least one row
    return t.masked_fill(ignored, IGNORE_INDEX)


def _inputs(shape: Shape, dtype, device, gen, std: float):
    m, v = int(shape["M"]), int(shape["V"])
    return (randn((m, v), dtype, device, gen, std=std), _targets(m, v, device, gen))


def make_inputs(shape: Shape, dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> Inputs:
    return _inputs(shape, dtype, device, gen, std=2.0)  # LM-head-like logits


def _large(shape, dtype, device, gen):
    # logits ~1e3: exp() overflows without subtracting the row max.
    return _inputs(shape, dtype, device, gen, std=1000.0)


def _peaked(shape, dtype, device, gen):
    logits, targets = make_inputs(shape, dtype, device, gen)
    rows = torch.arange(logits.shape[0], device=device)
    keep = targets != IGNORE_INDEX
    logits[rows[keep], targets[keep]] = 60.0  # a confident model: loss ~0, log-sum-exp must be exact
    return (logits, targets)


def _bytes(shape: Shape, dtype: torch.dtype) -> float:
    m, v = int(shape["M"]), int(shape["V"])
    return float(m * v) * elem_size(dtype) + 8.0 * m + 4.0  # logits read once, targets, scalar


_TOL = Tolerance(atol=1e-4, rtol=1e-4, rel_l2=1e-4)  # fp32 log-sum-exp for every input dtype

SPEC = KernelSpec(
    name="cross_entropy",
    summary="mean over non-ignored rows of logsumexp(logits) - logits[target]",
    arg_names=("logits", "targets"),
    reference=reference,
    make_inputs=make_inputs,
    shape_sets={
        "llama7b": ({"M": 8192, "V": 32000},),
        "gpt2": ({"M": 8192, "V": 50257},),
        "odd": ({"M": 333, "V": 1001},),
        "edge": ({"M": 1, "V": 2}, {"M": 5, "V": 131071}),
        "cpu": ({"M": 16, "V": 500}, {"M": 7, "V": 129}),
    },
    tolerances={torch.bfloat16: _TOL, torch.float16: _TOL, torch.float32: _TOL},
    flops=lambda s: 4.0 * int(s["M"]) * int(s["V"]),
    bytes_moved=_bytes,
    stress_cases=(
        StressCase("large_logits", "logits ~1e3 overflow exp() without the row max", _large),
        StressCase("peaked_rows", "target logit 60 above the rest: loss near 0", _peaked),
    ),
    # Averaging the per-row losses (M numbers) may use torch; the V-wide work may not.
    allowed_calls=("torch.sum", "torch.Tensor.sum", "torch.Tensor.ne"),
    extra_allowed_aten=frozenset({"sum", "div", "ne", "mean", "count_nonzero", "clamp", "clamp_min"}),
    output_dtype=torch.float32,
    eager=eager,
)
