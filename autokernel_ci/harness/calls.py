"""One guarded call of a candidate: the hardening that wraps every call the five stages make.

- a TorchDispatchMode admits only the spec's allowed aten ops (softmax may not call torch.softmax,
  RMSNorm may not call pow/mean/rsqrt) and fills every tensor the candidate allocates with a poison
  value (NaN for floats) so an output element the kernel never writes cannot look right;
- the inputs are saved before the call and must be bitwise unchanged after it;
- the output must be a plain torch.Tensor that shares no storage with any input.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from autokernel_ci import kernelfile
from autokernel_ci.harness.results import CheckFailure
from autokernel_ci.torch_profile import torch_profile

# Private references (taken before any candidate is imported; see guard.py).
_Tensor = torch.Tensor
_equal_elements = torch.Tensor.__eq__
_isnan = torch.isnan
_type = type

POISON_NAN = float("nan")
# Integers have no NaN: a value no index or count would hold.
POISON_INT = -123456789
# Factory ops whose result is uninitialised memory: these are the ones poisoned.
_UNINITIALISED_FACTORIES = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})


def poison_int(dtype: torch.dtype) -> int | bool:
    """POISON_INT where the dtype holds it; else its most negative value (int8, int16), or its largest
    (uint8: 255) since 0 is a value kernels rely on; bool: True. Filling a uint8 with -123456789
    raised "cannot be converted to type uint8_t" (seen on the H200 for a TMA descriptor buffer)."""
    if dtype == torch.bool:
        return True
    info = torch.iinfo(dtype)
    if info.min <= POISON_INT <= info.max:
        return POISON_INT
    return info.min if info.min < 0 else info.max


# What the Triton CPU interpreter itself calls on the candidate's tensors to stage them through
# numpy (measured on triton 3.6: copy_, empty, new_empty, set_, view): allowed only while interpreting.
_INTERPRETER_ATEN = frozenset({"set_"})


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "") == "1"


class GuardMode(TorchDispatchMode):
    """Records forbidden aten ops and poisons fresh allocations."""

    def __init__(self, allowed: frozenset[str], poison: float | None) -> None:
        super().__init__()
        self.allowed = allowed | (_INTERPRETER_ATEN if interpreting() else frozenset())
        self.poison = poison
        self.forbidden: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name not in self.allowed and name not in self.forbidden:
            self.forbidden.append(name)
        out = func(*args, **(kwargs or {}))
        if self.poison is not None and name in _UNINITIALISED_FACTORIES and _type(out) is _Tensor and out.numel():
            out.fill_(self.poison if out.is_floating_point() or out.is_complex() else poison_int(out.dtype))
        return out


@dataclass
class CallResult:
    out: Any = None
    seen: Any = None  # the output as a caller reads it right after the call (current stream, no sync)
    failure: CheckFailure | None = None
    forbidden: list[str] = field(default_factory=list)


def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise-style equality that treats NaN == NaN (poisoned padding, masks with -inf)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        eq = _equal_elements(a, b) | (_isnan(a) & _isnan(b))
    else:
        eq = _equal_elements(a, b)
    return bool(eq.all())


def tensors(values: Sequence[Any]) -> Iterator[tuple[int, torch.Tensor]]:
    for i, v in enumerate(values):
        if _type(v) is _Tensor or isinstance(v, torch.Tensor):
            yield i, v


def poison_cuda_cache(nbytes: int, device: torch.device) -> None:
    """Fill a freed block of the caching allocator with 0xFF bytes (NaN in fp16/bf16/fp32) so an
    allocation that bypasses torch's dispatcher still starts from poison."""
    if device.type != "cuda" or nbytes <= 0:
        return
    block = torch.empty(int(nbytes), dtype=torch.uint8, device=device)
    block.fill_(0xFF)
    del block


def guarded_call(fn: Callable[..., Any], inputs: Sequence[Any], *, allowed_aten: frozenset[str],
                 arg_names: Sequence[str], poison: float | None = POISON_NAN) -> CallResult:
    """Call fn(*inputs) under every per-call check. Exceptions from the candidate propagate."""
    saved = [(i, t.clone()) for i, t in tensors(inputs)]
    first = next((t for _, t in tensors(inputs)), None)
    if first is not None and poison is not None:
        poison_cuda_cache(2 * sum(t.numel() * t.element_size() for _, t in tensors(inputs)), first.device)
    mode = GuardMode(allowed_aten, poison)
    with mode:
        out = fn(*inputs)
    seen = out.clone() if _type(out) is _Tensor else None
    result = CallResult(out=out, seen=seen, forbidden=list(mode.forbidden))
    if mode.forbidden:
        result.failure = CheckFailure(
            check="forbidden_op",
            message=f"the candidate called aten::{', aten::'.join(mode.forbidden)}, which this kernel type may "
                    "not use (it must compute the result in its own kernel); allowed beyond allocation/views: "
                    f"{', '.join(sorted(allowed_aten - _common_allowed())) or 'nothing'}")
        return result
    if _type(out) is not _Tensor:
        result.failure = CheckFailure(
            check="output_type", message=f"kernel_fn returned {_type(out).__module__}.{_type(out).__name__}; it must "
            "return a plain torch.Tensor (a subclass could override comparisons)")
        return result
    lo, hi = _storage_span(out)
    for i, t in tensors(inputs):
        t_lo, t_hi = _storage_span(t)
        if lo < t_hi and t_lo < hi and out.numel() and t.numel():
            result.failure = CheckFailure(
                check="aliasing", message=f"the output shares memory with input {arg_names[i]!r}: write the result "
                "into a fresh tensor (torch.empty_like) instead of into or over an input")
            return result
    for i, before in saved:
        if not _same_values(inputs[i], before):
            result.failure = CheckFailure(
                check="input_mutated", message=f"input {arg_names[i]!r} changed during the call: a kernel must not "
                "write to its inputs (use a separate output or scratch buffer)")
            return result
    return result


def _common_allowed() -> frozenset[str]:
    from autokernel_ci.specs.base import COMMON_ALLOWED_ATEN

    return COMMON_ALLOWED_ATEN


@contextmanager
def launch_tracker(module_name: str, kernel_names: Sequence[str], device: torch.device) -> Iterator[list[str]]:
    """Yield a list that fills with the candidate's own kernel launches made inside the block.

    CPU (Triton interpreter): a sys.setprofile hook watches the interpreter's grid executor and keeps
    launches of jit functions defined in the candidate's module; nothing is wrapped or patched.
    CUDA: torch.profiler's kernel events whose names contain one of the candidate's kernel names.
    """
    launches: list[str] = []
    if device.type == "cuda":
        from torch.profiler import ProfilerActivity

        with torch_profile([ProfilerActivity.CUDA]) as prof:
            yield launches
            torch.cuda.synchronize()
        names = {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}
        launches.extend(sorted(n for n in names if kernelfile.own_kernel_event(n, kernel_names)))
        return
    from triton.runtime.interpreter import GridExecutor

    code = GridExecutor.__call__.__code__
    previous = sys.getprofile()

    def hook(frame, event, arg):  # noqa: ARG001 - sys.setprofile signature
        if event == "call" and frame.f_code is code:
            jit_fn = frame.f_locals.get("self").fn
            if getattr(jit_fn, "__module__", None) == module_name:
                launches.append(jit_fn.__name__)

    sys.setprofile(hook)
    try:
        yield launches
    finally:
        sys.setprofile(previous)
