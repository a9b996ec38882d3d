"""The spec object: everything tests, harness, profiler, plug-back and reports know about a kernel type.

One `KernelSpec` per kernel type lives in its own module (specs/<type>.py) and is registered in
specs/__init__.py. Nothing else in the package may restate these facts (signatures, tolerances,
shapes, FLOP/byte models): read them from the spec.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

Shape = Mapping[str, Any]  # e.g. {"M": 8192, "N": 4096}; attention also carries {"causal": True}
Inputs = tuple[Any, ...]  # positional arguments of kernel_fn, in the spec's `arg_names` order
InputMaker = Callable[[Shape, torch.dtype, torch.device, torch.Generator], Inputs]

# Shape-set names every spec provides, in the order the shape sweep runs them.
MODEL_SETS = ("llama7b", "gpt2")  # model-like sizes: the GPU sweep and the benchmark
CPU_SET = "cpu"  # small sizes the Triton interpreter runs in seconds
ODD_SET = "odd"  # non-power-of-two sizes of moderate size
EDGE_SET = "edge"  # size 1, primes, tiny rows
SHAPE_SET_NAMES = (*MODEL_SETS, ODD_SET, EDGE_SET, CPU_SET)

# aten ops any candidate may call: allocation, views, metadata and plain copies. Everything else
# a candidate calls through torch is checked against its spec's `extra_allowed_aten` at run time,
# so "softmax" written as torch.softmax, or RMSNorm written as pow/mean/rsqrt, is rejected.
COMMON_ALLOWED_ATEN = frozenset(
    {
        "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
        "zeros", "zeros_like", "new_zeros", "full", "full_like", "fill_", "zero_",
        "view", "_unsafe_view", "reshape", "as_strided", "expand", "squeeze", "unsqueeze",
        "t", "transpose", "permute", "flatten", "unflatten", "slice", "select", "split",
        "contiguous", "clone", "copy_", "_to_copy", "to", "detach", "alias", "lift_fresh",
        "size", "stride", "sym_size", "sym_stride", "numel", "is_contiguous", "dim",
        "_local_scalar_dense", "item", "scalar_tensor", "arange",
    }
)


@dataclass(frozen=True)
class Tolerance:
    """Two tests against the high-precision reference, both must hold.

    Elementwise |out - ref| <= atol + rtol * |ref| catches a single wrong element; the relative
    L2 error ||out - ref|| / ||ref|| <= rel_l2 catches a kernel that is uniformly less precise
    than the dtype allows (fp32 computed in bf16 gives ~3e-3, true fp32 ~1e-7, tf32 ~3e-4) and
    outputs so small that atol alone would accept zeros (softmax over 8192 columns: ~1e-4 each).
    """

    atol: float
    rtol: float
    rel_l2: float


@dataclass(frozen=True)
class StressCase:
    """A stage-3 (numerical stability) input family: realistic values that break naive kernels.

    `tolerances` overrides the spec's bound for the dtypes it lists. Use it only where the inputs
    are so ill-conditioned in that dtype that the spec's bound rejects the eager baseline itself,
    keep it tight enough that the naive algorithm the case exists for still fails, and put the
    measured numbers beside it in the spec module.
    """

    name: str
    why: str
    make_inputs: InputMaker
    tolerances: Mapping[torch.dtype, Tolerance] = field(default_factory=dict)


@dataclass(frozen=True)
class KernelSpec:
    name: str
    summary: str
    arg_names: tuple[str, ...]
    reference: Callable[..., Any]  # PyTorch reference, called on inputs upcast to `reference_dtype`
    make_inputs: InputMaker  # realistic, non-trivial inputs for one shape
    shape_sets: Mapping[str, Sequence[Shape]]
    tolerances: Mapping[torch.dtype, Tolerance]  # the dtypes this type runs in, first = smoke dtype
    flops: Callable[[Shape], float]
    bytes_moved: Callable[[Shape, torch.dtype], float]  # minimal traffic: inputs read once, output written once
    stress_cases: tuple[StressCase, ...]
    allowed_calls: tuple[str, ...] = ()  # library calls (Python spelling) a candidate may still make
    extra_allowed_aten: frozenset[str] = frozenset()  # aten names behind `allowed_calls`
    reference_dtype: torch.dtype = torch.float64  # matmul-like types use float32 (see their modules)
    deterministic: bool = True  # False: run-to-run differences within tolerance are accepted
    noncontiguous_args: tuple[int, ...] = ()  # argument positions the reference accepts strided
    output_dtype: torch.dtype | None = None  # None: the first tensor input's dtype
    primary_metric: str = "GB/s"  # "GB/s" for memory-bound types, "TFLOP/s" for compute-bound
    notes: Mapping[str, str] = field(default_factory=dict)
    # The eager code a model runs today for this op, called on the inputs as they are (no upcast):
    # the baseline every speedup is measured against. None: the reference in the input dtype.
    eager: Callable[..., Any] | None = None

    # -- derived facts -----------------------------------------------------------------------
    @property
    def dtypes(self) -> tuple[torch.dtype, ...]:
        return tuple(self.tolerances)

    @property
    def allowed_aten(self) -> frozenset[str]:
        return COMMON_ALLOWED_ATEN | self.extra_allowed_aten

    def shapes(self, *set_names: str) -> list[Shape]:
        """Shapes of the named sets (all sets when none is named), in sweep order."""
        names = set_names or SHAPE_SET_NAMES
        unknown = [n for n in names if n not in self.shape_sets]
        if unknown:
            raise KeyError(f"{self.name}: no shape set {unknown}; known: {sorted(self.shape_sets)}")
        return [dict(s) for n in names for s in self.shape_sets[n]]

    def model_shape(self) -> Shape:
        """The headline benchmark shape (first LLaMA-7B-like shape)."""
        return dict(self.shape_sets["llama7b"][0])

    def arithmetic_intensity(self, shape: Shape, dtype: torch.dtype) -> float:
        return self.flops(shape) / max(self.bytes_moved(shape, dtype), 1.0)

    def eager_fn(self) -> Callable[..., Any]:
        """The eager baseline: `eager` when the type has one, else the reference (run in the input dtype)."""
        return self.eager if self.eager is not None else self.reference

    def tolerance(self, dtype: torch.dtype, stress_case: str | None = None) -> Tolerance:
        """The bound for `dtype`, or the named stress case's own bound where it sets one."""
        if stress_case is not None:
            case = next((c for c in self.stress_cases if c.name == stress_case), None)
            if case is None:
                raise KeyError(f"{self.name}: no stress case {stress_case!r}; known: "
                               f"{[c.name for c in self.stress_cases]}")
            if dtype in case.tolerances:
                return case.tolerances[dtype]
        return self.tolerances[dtype]

    def run_reference(self, inputs: Inputs) -> Any:
        """Reference output in `reference_dtype` (floating tensors upcast, others passed as is)."""
        return self.reference(*upcast(inputs, self.reference_dtype))

    def describe_shape(self, shape: Shape) -> str:
        return "x".join(f"{k}{v}" if not isinstance(v, bool) else (k if v else f"no{k}") for k, v in shape.items())


# -- helpers the spec modules share ---------------------------------------------------------------
def row_dims(shape: Shape) -> tuple[int, ...]:
    """The row-wise types' tensor shape ([B,] M, N): rows of N, an optional batch dimension in the edge sets."""
    return (*([int(shape["B"])] if "B" in shape else []), int(shape["M"]), int(shape["N"]))


def elem_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def upcast(inputs: Inputs, dtype: torch.dtype) -> Inputs:
    return tuple(
        x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs
    )


def randn(
    shape: Sequence[int],
    dtype: torch.dtype,
    device: torch.device,
    gen: torch.Generator,
    *,
    std: float = 1.0,
    mean: float = 0.0,
) -> torch.Tensor:
    """Normal samples drawn in fp32 on `device` with `gen`, then cast (same values on any dtype)."""
    x = torch.randn(tuple(shape), generator=gen, device=device, dtype=torch.float32)
    return (x * std + mean).to(dtype)


def affine_weight(n: int, dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> torch.Tensor:
    """A trained-looking norm weight: around 1 with spread, never all ones (an ignored weight shows)."""
    return randn((n,), dtype, device, gen, std=0.25, mean=1.0)


def prod(values: Sequence[int]) -> int:
    return math.prod(int(v) for v in values)


def rows_and_cols(shape: Shape) -> tuple[int, int]:
    """(rows, N) for row-wise types whose shapes are {"M": rows, "N": row length}."""
    return int(shape["M"]), int(shape["N"])
