"""Register kernel files as torch.library custom ops: `torch.ops.autokernel.<op_id>`.

A custom op is opaque to torch.compile (it calls it, it does not trace into Triton's launcher) and
its fake implementation gives the compiler output shapes without running it, so a patched model
runs eagerly and compiles with fullgraph=True. The op's name also shows in profiler traces, which
is how the end-to-end check proves the kernel ran inside the model.

Kernel files are imported and run in this process: call this from the sandboxed end-to-end worker
(end_to_end.py) or on kernels that passed verification.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from autokernel_ci import kernelfile
from autokernel_ci.specs import get_spec

NAMESPACE = "autokernel"
# Argument types of the spec signatures (DESIGN.md §10) that are not tensors.
SCALAR_TYPES = {"eps": "float", "causal": "bool", "sm_scale": "float"}

_LIB = torch.library.Library(NAMESPACE, "FRAGMENT")
_IMPLS: dict[str, Callable[..., torch.Tensor]] = {}  # op name -> the loaded kernel_fn (swappable)
_TYPES: dict[str, str] = {}  # op name -> kernel type it was defined for


class RegistrationError(ValueError):
    pass


@dataclass
class KernelOp:
    op_id: str
    kernel_type: str
    op_name: str  # "rmsnorm_0"
    path: str
    kernel_names: tuple[str, ...]  # Triton jit functions / CUDA kernels the file defines

    @property
    def qualname(self) -> str:
        return f"{NAMESPACE}::{self.op_name}"

    @property
    def op(self) -> Any:
        return getattr(getattr(torch.ops, NAMESPACE), self.op_name)

    def __call__(self, *args: Any) -> torch.Tensor:
        return self.op(*args)


def op_name(op_id: str) -> str:
    name = op_id.replace("-", "_")
    if not name.isidentifier():
        raise RegistrationError(f"op id {op_id!r} cannot name a custom op: use <kernel_type>-<n> ids from the plan")
    return name


def kernel_type_of(op_id: str) -> str:
    return op_id.rsplit("-", 1)[0]


def schema(kernel_type: str) -> str:
    args = ", ".join(f"{SCALAR_TYPES.get(n, 'Tensor')} {n}" for n in get_spec(kernel_type).arg_names)
    return f"({args}) -> Tensor"


def _fake(kernel_type: str) -> Callable[..., torch.Tensor]:
    """Output metadata per DESIGN.md §10's table, without running the kernel."""
    def fake(*args: Any) -> torch.Tensor:
        first = args[0]
        if kernel_type == "matmul":
            return first.new_empty((first.shape[0], args[1].shape[1]))
        if kernel_type == "fused_mlp":
            return first.new_empty((first.shape[0], args[3].shape[0]))
        if kernel_type == "reduce":
            return first.new_empty(first.shape[:-1])
        if kernel_type == "cross_entropy":
            return first.new_empty((), dtype=torch.float32)
        return torch.empty_like(first, memory_format=torch.contiguous_format)
    return fake


def _impl(name: str, kernel_type: str) -> Callable[..., torch.Tensor]:
    noncontig = set(get_spec(kernel_type).noncontiguous_args)

    def impl(*args: Any) -> torch.Tensor:
        # Kernels may assume row-major inputs except where the spec says the reference takes strides.
        args = tuple(a.contiguous() if isinstance(a, torch.Tensor) and i not in noncontig else a
                     for i, a in enumerate(args))
        out = _IMPLS[name](*args)
        if any(isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == out.untyped_storage().data_ptr()
               for a in args):
            out = out.clone()  # a custom op must not return a view of its input
        return out
    return impl


def _define(name: str, kernel_type: str) -> None:
    if name in _TYPES:
        if _TYPES[name] != kernel_type:
            raise RegistrationError(f"{NAMESPACE}::{name} is already a {_TYPES[name]} op, not {kernel_type}")
        return
    _LIB.define(f"{name}{schema(kernel_type)}")
    _LIB.impl(name, _impl(name, kernel_type), "CompositeExplicitAutograd")
    torch.library.register_fake(f"{NAMESPACE}::{name}", _fake(kernel_type), lib=_LIB)
    _TYPES[name] = kernel_type


def import_kernel(path: str | Path) -> tuple[kernelfile.KernelFile, ModuleType]:
    kf = kernelfile.load(path)  # the static contract first: type, signature
    p = Path(path).resolve()
    module_name = f"autokernel_kernel_{p.stem}_{kf.source_hash}"
    if module_name in sys.modules:
        return kf, sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, p)
    if spec is None or spec.loader is None:
        raise RegistrationError(f"{p} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return kf, module


def register_kernel(op_id: str, path: str | Path) -> KernelOp:
    kernel_type = kernel_type_of(op_id)
    kf, module = import_kernel(path)
    if kf.kernel_type != kernel_type:
        raise RegistrationError(f"{path} is a {kf.kernel_type} kernel but plan op {op_id} is {kernel_type}; "
                                "pass the kernel file of that op")
    name = op_name(op_id)
    _define(name, kernel_type)
    _IMPLS[name] = module.kernel_fn
    return KernelOp(op_id, kernel_type, name, str(path), kernelfile.own_kernel_names(module, kf.source))


def register_kernels(kernels: Mapping[str, str | Path]) -> dict[str, KernelOp]:
    """Register {op_id: kernel file} as torch.ops.autokernel.<op_id with '-' -> '_'>."""
    return {op_id: register_kernel(op_id, path) for op_id, path in kernels.items()}
