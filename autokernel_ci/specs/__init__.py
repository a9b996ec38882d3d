"""The nine kernel-type specs. `get_spec(name)` is the one way to reach them."""

from __future__ import annotations

from autokernel_ci.specs import (
    cross_entropy,
    flash_attention,
    fused_mlp,
    layernorm,
    matmul,
    reduce,
    rmsnorm,
    rotary_embedding,
    softmax,
)
from autokernel_ci.specs.base import KernelSpec, Shape, StressCase, Tolerance

SPECS: dict[str, KernelSpec] = {
    m.SPEC.name: m.SPEC
    for m in (matmul, softmax, layernorm, rmsnorm, flash_attention, fused_mlp, cross_entropy,
              rotary_embedding, reduce)
}
KERNEL_TYPES: tuple[str, ...] = tuple(SPECS)


def get_spec(name: str) -> KernelSpec:
    try:
        return SPECS[name]
    except KeyError:
        raise KeyError(f"unknown kernel type {name!r}: expected one of {', '.join(KERNEL_TYPES)}") from None


__all__ = ["KERNEL_TYPES", "SPECS", "KernelSpec", "Shape", "StressCase", "Tolerance", "get_spec"]
