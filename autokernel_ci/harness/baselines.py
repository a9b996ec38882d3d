"""The eager and torch.compile baselines a candidate is timed against.

The eager baseline is the spec's: `KernelSpec.eager_fn()`, the code models run today in their own
dtype (LLaMA's RMSNorm upcasting to fp32 and back, SDPA for attention, F.cross_entropy for the
loss; for the other types the reference called on the inputs as they are). Nothing here restates it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from autokernel_ci.specs.base import KernelSpec

_compiled: dict[tuple, Callable[..., Any]] = {}


def eager(spec: KernelSpec) -> Callable[..., Any]:
    return spec.eager_fn()


def compiled(spec: KernelSpec, shape_key: tuple) -> Callable[..., Any]:
    """torch.compile of the eager baseline, one compiled callable per (type, shape, dtype), kept for the
    worker's lifetime: compiling costs seconds, the loop benches the same shapes every experiment."""
    key = (spec.name, shape_key)
    if key not in _compiled:
        _compiled[key] = torch.compile(eager(spec), dynamic=False)
    return _compiled[key]
