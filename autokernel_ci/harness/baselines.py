"""The eager baseline per kernel type: what PyTorch runs today in the model's own dtype.

Mostly the spec's reference called on the inputs as they are (no upcast). Where models run
something else, that is the baseline: LLaMA's RMSNorm upcasts to fp32 and casts back (the spec's
reference would compute in bf16), and attention runs SDPA rather than the explicit softmax.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from autokernel_ci.specs.base import KernelSpec


def llama_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' LlamaRMSNorm.forward."""
    dtype = x.dtype
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def sdpa(q, k, v, causal: bool, sm_scale: float) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale,
                                          enable_gqa=q.shape[1] != k.shape[1])


EAGER_OVERRIDES: dict[str, Callable[..., Any]] = {"rmsnorm": llama_rmsnorm, "flash_attention": sdpa}

_compiled: dict[tuple, Callable[..., Any]] = {}


def eager(spec: KernelSpec) -> Callable[..., Any]:
    return EAGER_OVERRIDES.get(spec.name, spec.reference)


def compiled(spec: KernelSpec, shape_key: tuple) -> Callable[..., Any]:
    """torch.compile of the eager baseline, one compiled callable per (type, shape, dtype), kept for the
    worker's lifetime: compiling costs seconds, the loop benches the same shapes every experiment."""
    key = (spec.name, shape_key)
    if key not in _compiled:
        _compiled[key] = torch.compile(eager(spec), dynamic=False)
    return _compiled[key]
