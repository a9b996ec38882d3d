"""Swap a model's ops for registered kernels, following the plan's op -> module mapping.

Modules are replaced where the op is a module (RMSNorm, LayerNorm, the SwiGLU MLP, nn.Linear);
function calls are redirected inside the module that makes them: SDPA, softmax, sum and
cross_entropy through a TorchFunctionMode entered around that module's forward (dynamo traces
through it, so fullgraph compilation still works), the RoPE function by rebinding its name in the
forward's globals. Calls whose arguments the kernel's contract does not cover (an attention mask,
dropout, a sum over another dim) fall through to PyTorch.

The patched model is a copy that shares the original's parameters and buffers (no extra memory).
"""

from __future__ import annotations

import copy
import inspect
import math
import re
import sys
import types
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from autokernel_ci.integrate.custom_ops import KernelOp
from autokernel_ci.plan import Plan
from autokernel_ci.profiling.classify import WRITTEN_ATTENTION, norm_eps, norm_role, swiglu_parts
from autokernel_ci.specs.rmsnorm import EPS as RMSNORM_EPS

ROTARY_NAME = re.compile(r"rotary|rope", re.IGNORECASE)
IGNORE_INDEX = -100


@dataclass
class PatchRecord:
    op_id: str
    module: str  # module path ("" = the model)
    how: str  # "module" | "redirect:<function>" | "globals:<name>"


@dataclass
class SkipRecord:
    op_id: str
    module: str
    reason: str


@dataclass
class PatchReport:
    applied: list[PatchRecord] = field(default_factory=list)
    skipped: list[SkipRecord] = field(default_factory=list)

    @property
    def op_ids(self) -> list[str]:
        return list(dict.fromkeys(r.op_id for r in self.applied))


# -- module replacements -----------------------------------------------------------------------------
class KernelRMSNorm(nn.Module):
    def __init__(self, op: KernelOp, weight: nn.Parameter, eps: float):
        super().__init__()
        self.op, self.weight, self.eps = op, weight, eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(x, self.weight, self.eps)


class KernelLayerNorm(nn.Module):
    def __init__(self, op: KernelOp, weight: torch.Tensor, bias: torch.Tensor, eps: float):
        super().__init__()
        self.op, self.weight, self.bias, self.eps = op, weight, bias, eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(x, self.weight, self.bias, self.eps)


class KernelSwiGLU(nn.Module):
    def __init__(self, op: KernelOp, gate: nn.Linear, up: nn.Linear, down: nn.Linear):
        super().__init__()
        self.op, self.w_gate, self.w_up, self.w_down = op, gate.weight, up.weight, down.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.op(x.reshape(-1, x.shape[-1]), self.w_gate, self.w_up, self.w_down)
        return out.view(*x.shape[:-1], out.shape[-1])


class KernelLinear(nn.Module):
    def __init__(self, op: KernelOp, linear: nn.Linear):
        super().__init__()
        self.op, self.weight, self.bias = op, linear.weight, linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # b = weight^T as a strided view: the matmul spec accepts a non-contiguous b (nn.Linear's case).
        out = self.op(x.reshape(-1, x.shape[-1]), self.weight.t())
        out = out.view(*x.shape[:-1], out.shape[-1])
        return out + self.bias if self.bias is not None else out


def _replace_module(model: nn.Module, op: KernelOp, path: str) -> nn.Module | str:
    """The replacement module for `path`, or the reason there is none."""
    m = model.get_submodule(path)
    t = op.kernel_type
    if t == "rmsnorm":
        if norm_role(m) != "rmsnorm" or getattr(m, "weight", None) is None:
            return f"{type(m).__name__} is not an RMSNorm with a weight"
        return KernelRMSNorm(op, m.weight, norm_eps(m, RMSNORM_EPS))
    if t == "layernorm":
        if not isinstance(m, nn.LayerNorm) or len(m.normalized_shape) != 1:
            return f"{type(m).__name__} is not a LayerNorm over the last dimension"
        n = m.normalized_shape[0]
        weight = m.weight if m.weight is not None else torch.ones(n, device=_device(m), dtype=_dtype(model))
        bias = m.bias if m.bias is not None else torch.zeros(n, device=_device(m), dtype=_dtype(model))
        return KernelLayerNorm(op, weight, bias, m.eps)
    if t == "fused_mlp":
        parts = swiglu_parts(m)
        if parts is None:
            return f"{type(m).__name__} is not a SwiGLU MLP (three bias-free linears D->F, D->F, F->D)"
        return KernelSwiGLU(op, *parts)
    if t == "matmul":
        if not isinstance(m, nn.Linear):
            return f"the matmul runs in {type(m).__name__}, not in an nn.Linear: no module to swap"
        return KernelLinear(op, m)
    return f"{t} is not patched by module replacement"


def _device(m: nn.Module) -> torch.device:
    return next(iter(m.parameters()), torch.empty(0)).device


def _dtype(m: nn.Module) -> torch.dtype:
    return next((p.dtype for p in m.parameters() if p.is_floating_point()), torch.float32)


def _set_submodule(model: nn.Module, path: str, new: nn.Module) -> None:
    parent_path, _, name = path.rpartition(".")
    setattr(model.get_submodule(parent_path), name, new)


# -- function redirects ----------------------------------------------------------------------------
def _last_dim(x: torch.Tensor, dim: Any) -> bool:
    if isinstance(dim, list | tuple):
        if len(dim) != 1:
            return False
        dim = dim[0]
    return isinstance(dim, int) and dim in (-1, x.dim() - 1)


def _sdpa(op: KernelOp) -> Callable[..., Any]:
    def handler(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if attn_mask is not None or dropout_p != 0.0 or query.dim() != 4 or key.shape[2] != query.shape[2]:
            return NotImplemented
        if key.shape[1] != query.shape[1] and not (enable_gqa and query.shape[1] % key.shape[1] == 0):
            return NotImplemented
        sm_scale = scale if scale is not None else 1.0 / math.sqrt(query.shape[-1])
        return op(query, key, value, bool(is_causal), float(sm_scale))
    return handler


def _softmax(op: KernelOp) -> Callable[..., Any]:
    def handler(input, dim=None, _stacklevel=3, dtype=None):
        if dtype is not None or dim is None or not _last_dim(input, dim):
            return NotImplemented
        return op(input)
    return handler


def _sum(op: KernelOp) -> Callable[..., Any]:
    def handler(input, dim=None, keepdim=False, *, dtype=None):
        if dtype is not None or keepdim or dim is None or not _last_dim(input, dim) or not input.is_floating_point():
            return NotImplemented
        return op(input)
    return handler


def _cross_entropy(op: KernelOp) -> Callable[..., Any]:
    def handler(input, target, weight=None, size_average=None, ignore_index=IGNORE_INDEX, reduce=None,
                reduction="mean", label_smoothing=0.0):
        if (weight is not None or size_average is not None or reduce is not None or reduction != "mean"
                or ignore_index != IGNORE_INDEX or label_smoothing != 0.0 or input.dim() != 2 or target.dim() != 1):
            return NotImplemented
        return op(input, target).to(input.dtype)  # F.cross_entropy returns the logits' dtype
    return handler


REDIRECTS: dict[str, tuple[tuple[Callable[..., Any], ...], Callable[[KernelOp], Callable[..., Any]]]] = {
    "flash_attention": ((F.scaled_dot_product_attention,), _sdpa),
    "softmax": ((torch.softmax, F.softmax, torch.Tensor.softmax), _softmax),
    "reduce": ((torch.sum, torch.Tensor.sum), _sum),
    "cross_entropy": ((F.cross_entropy,), _cross_entropy),
}


class Redirect(TorchFunctionMode):
    """Routes chosen torch functions to kernels; anything a handler declines runs unchanged."""

    def __init__(self, routes: list[tuple[Callable[..., Any], Callable[..., Any]]]):
        super().__init__()
        self.routes = routes

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for target, handler in self.routes:
            if func is target:
                out = handler(*args, **kwargs)
                if out is not NotImplemented:
                    return out
                break
        return func(*args, **kwargs)


# -- RoPE function rebinding ---------------------------------------------------------------------------
def _pick(ops: list[tuple[KernelOp, dict[str, Any]]], x: torch.Tensor) -> KernelOp:
    """The op whose plan shape has x's heads (q and k of GQA are separate plan ops), else the first."""
    for kop, shape in ops:
        if shape.get("H") == x.shape[1] and shape.get("D") == x.shape[-1]:
            return kop
    return ops[0][0]


def _rope_function(obj: Any) -> Callable[..., Any] | None:
    """The Python function behind a global a forward calls: a plain function, or the forward of a function wrapped
    in an nn.Module (transformers 5 wraps `apply_rotary_pos_emb` so a hub kernel can replace it; its own
    signature is (*args, **kwargs))."""
    if inspect.isfunction(obj):
        return obj
    if isinstance(obj, nn.Module) and inspect.ismethod(getattr(obj, "forward", None)):
        return obj.forward
    return None


def _arguments(signature: inspect.Signature, args: tuple, kwargs: dict) -> dict[str, Any] | None:
    """The call's arguments by name, defaults filled in (a function may default unsqueeze_dim to 2); None if
    the call does not fit the signature (the original then raises its own error)."""
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    return bound.arguments


def _rope_form(original: Callable[..., Any]) -> tuple[str, inspect.Signature] | None:
    """"x" for rope(x, cos, sin[, unsqueeze_dim]), "qk" for Hugging Face's (q, k, cos, sin, ...), else None."""
    function = _rope_function(original)
    if function is None:
        return None
    signature = inspect.signature(function)
    params = list(signature.parameters)
    if params[:3] == ["x", "cos", "sin"] or len(params) == 3:
        return "x", signature
    if params[:4] == ["q", "k", "cos", "sin"]:
        return "qk", signature
    return None


def _rotary_wrapper(ops: list[tuple[KernelOp, dict[str, Any]]], original: Callable[..., Any]) \
        -> Callable[..., Any] | None:
    """A stand-in for a RoPE function that sends the calls our kernel handles to it and every other call to
    the original, or None when the signature is neither form (_rope_form)."""
    form = _rope_form(original)
    if form is None:
        return None
    kind, signature = form
    params = list(signature.parameters)
    if kind == "x":
        def rope(*args, **kwargs):
            a = _arguments(signature, args, kwargs)
            if a is None or a.get("unsqueeze_dim", 1) != 1:  # (x, cos, sin, unsqueeze_dim=1): Gemma 3n / 4 pass 2
                return original(*args, **kwargs)
            x, cos, sin = (a[n] for n in params[:3])
            if not all(isinstance(t, torch.Tensor) for t in (x, cos, sin)) or x.dim() != 4 \
                    or cos.shape != (x.shape[2], x.shape[-1] // 2) or sin.shape != cos.shape:
                return original(*args, **kwargs)
            return _pick(ops, x)(x, cos, sin)
        return rope
    # kind "qk": Hugging Face apply_rotary_pos_emb: cos/sin [B, S, D] (the D/2 table repeated twice), the
    # same positions in every batch row for a plain forward; our kernel takes the [S, D/2] table.
    # (q, k, cos, sin, position_ids=None, unsqueeze_dim=1) before transformers 5, without position_ids since;
    # some models call it with k=None.
    def rope_qk(*args, **kwargs):
        a = _arguments(signature, args, kwargs)
        if a is None or a.get("unsqueeze_dim", 1) != 1:
            return original(*args, **kwargs)
        q, k, cos, sin = a["q"], a["k"], a["cos"], a["sin"]
        half = q.shape[-1] // 2 if isinstance(q, torch.Tensor) else 0
        if not all(isinstance(t, torch.Tensor) for t in (q, k, cos, sin)) or q.dim() != 4 or cos.dim() != 3 \
                or cos.shape[-1] != 2 * half:
            return original(*args, **kwargs)
        c, s = cos[0, :, :half], sin[0, :, :half]
        return _pick(ops, q)(q, c, s), _pick(ops, k)(k, c, s)
    return rope_qk


def _rotary_function_names(module: nn.Module) -> list[str] | str:
    """The RoPE functions `module.forward` calls by name that a stand-in can replace, or why there are none."""
    fwd = inspect.unwrap(type(module).forward)  # look through decorators (functools.wraps)
    called = [n for n in fwd.__code__.co_names
              if ROTARY_NAME.search(n) and _rope_function(fwd.__globals__.get(n)) is not None]
    names = [n for n in called if _rope_form(fwd.__globals__[n]) is not None]
    if not called:
        return (f"{type(module).__name__}.forward calls no RoPE function by name (rotary/rope): "
                "inline RoPE code cannot be swapped")
    if not names:
        return (f"{type(module).__name__}.forward calls {', '.join(called)}, whose signature is neither (x, cos, "
                "sin) nor (q, k, cos, sin, ...): no kernel call can stand in for it")
    return names


def _overlay_module(fwd: Callable[..., Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """Globals for a copy of `fwd` where `overlay` rebinds names. They live in a real (registered)
    module so that dynamo's guards, which re-import a function's globals by module name, find them."""
    name = f"{fwd.__globals__.get('__name__', 'model')}__autokernel_{len(_OVERLAYS)}"
    module = types.ModuleType(name)
    module.__dict__.update({**fwd.__globals__, **overlay, "__name__": name})
    sys.modules[name] = module
    _OVERLAYS.append(name)
    return module.__dict__


_OVERLAYS: list[str] = []


def _wrap_forward(module: nn.Module, routes: list[tuple[Callable[..., Any], Callable[..., Any]]],
                  overlay: dict[str, Any]) -> None:
    fwd = type(module).forward
    if overlay:
        # The undecorated forward: decorators (Hugging Face's kwarg-deprecation shims) hold the
        # original in a closure we cannot rebind; they only rename deprecated keyword arguments.
        fwd = inspect.unwrap(fwd)
        fwd = types.FunctionType(fwd.__code__, _overlay_module(fwd, overlay), fwd.__name__,
                                 fwd.__defaults__, fwd.__closure__)
    bound = fwd.__get__(module, type(module))
    if not routes:
        module.forward = bound
        return
    mode_routes = list(routes)

    def forward(*args: Any, **kwargs: Any) -> Any:
        with Redirect(mode_routes):
            return bound(*args, **kwargs)
    module.forward = forward


# -- the patcher ---------------------------------------------------------------------------------------
def shared_copy(model: nn.Module) -> nn.Module:
    """A structural copy of `model` that shares every parameter and buffer with it."""
    memo: dict[int, Any] = {id(t): t for t in [*model.parameters(), *model.buffers()]}
    return copy.deepcopy(model, memo)


def patch_model(model: nn.Module, plan: Plan, kernels: Mapping[str, KernelOp], *,
                copy_model: bool = True) -> nn.Module:
    """The model with the plan's ops swapped for `kernels` ({op_id: KernelOp}).

    The result carries `autokernel_patches` (a PatchReport): what was swapped where, what was not
    and why. With copy_model=False the model is patched in place.
    """
    patched = shared_copy(model) if copy_model else model
    report = PatchReport()
    routes: dict[str, list[tuple[Callable[..., Any], Callable[..., Any]]]] = defaultdict(list)
    rope_ops: dict[str, list[tuple[KernelOp, dict[str, Any]]]] = defaultdict(list)
    for op_id, kop in kernels.items():
        plan_op = plan.op(op_id)
        for path in plan_op.modules:
            try:
                module = patched.get_submodule(path)
            except AttributeError:
                report.skipped.append(SkipRecord(op_id, path, "module not found in the model"))
                continue
            t = kop.kernel_type
            written_out = t == "flash_attention" and plan_op.name.startswith(WRITTEN_ATTENTION)
            if t in REDIRECTS and not written_out:
                targets, make = REDIRECTS[t]
                handler = make(kop)
                routes[path].extend((target, handler) for target in targets)
                report.applied.append(PatchRecord(op_id, path, f"redirect:{targets[0].__name__}"))
            elif written_out:
                report.skipped.append(SkipRecord(op_id, path, "attention written out (matmul/softmax/matmul) in "
                                                 f"{type(module).__name__}: no SDPA call to redirect; use "
                                                 "F.scaled_dot_product_attention to plug a kernel in"))
            elif t == "rotary_embedding":
                names = _rotary_function_names(module)
                if isinstance(names, str):
                    report.skipped.append(SkipRecord(op_id, path, names))
                else:
                    rope_ops[path].append((kop, plan_op.shapes[0] if plan_op.shapes else {}))
                    report.applied.append(PatchRecord(op_id, path, f"globals:{', '.join(names)}"))
            else:
                new = _replace_module(patched, kop, path)
                if isinstance(new, str):
                    report.skipped.append(SkipRecord(op_id, path, new))
                    continue
                if path == "":
                    report.skipped.append(SkipRecord(op_id, path, "the model itself cannot be replaced"))
                    continue
                _set_submodule(patched, path, new)
                report.applied.append(PatchRecord(op_id, path, "module"))
    overlays: dict[str, dict[str, Any]] = {}
    for path, ops in rope_ops.items():
        fwd = inspect.unwrap(type(patched.get_submodule(path)).forward)
        names = _rotary_function_names(patched.get_submodule(path))
        wrappers = {n: _rotary_wrapper(ops, fwd.__globals__[n]) for n in names}
        overlays[path] = {n: w for n, w in wrappers.items() if w is not None}
    for path in set(routes) | set(overlays):
        _wrap_forward(patched.get_submodule(path), routes.get(path, []), overlays.get(path, {}))
    patched.autokernel_patches = report
    return patched

