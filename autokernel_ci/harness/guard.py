"""Tamper guard: detect a candidate that patches torch, the standard library or the checker itself.

The candidate is imported into the checker's own process, so it *can* rebind `torch.allclose` or
`autokernel_ci.compare.compare`. The guard records the identity of every function the checks rely
on before the candidate is imported and compares after import and after every stage; any change
fails the verdict with check "tampering" (and the worker is replaced, so the patch dies with it).
"""

from __future__ import annotations

import builtins
import gc
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

# (importable module, attribute path) pairs whose identity a candidate must not change. The list
# covers what compare(), the checks and the timing read; add to it when they start reading more.
# Not torch.manual_seed: importing torch._dynamo (lazily, for the compile baseline) rebinds it.
GUARDED_ATTRIBUTES: tuple[tuple[str, str], ...] = (
    ("torch", "allclose"), ("torch", "equal"), ("torch", "isfinite"), ("torch", "isnan"),
    ("torch", "isclose"), ("torch", "randn"), ("torch", "rand"), ("torch", "randint"),
    ("torch", "Generator"), ("torch", "empty"), ("torch", "zeros_like"),
    ("torch", "where"), ("torch", "float64"), ("torch", "Tensor"),
    ("torch.testing", "assert_close"),
    ("torch.Tensor", "__eq__"), ("torch.Tensor", "__ne__"), ("torch.Tensor", "__sub__"),
    ("torch.Tensor", "__lt__"), ("torch.Tensor", "__gt__"), ("torch.Tensor", "__le__"),
    ("torch.Tensor", "__bool__"), ("torch.Tensor", "__float__"), ("torch.Tensor", "abs"),
    ("torch.Tensor", "to"), ("torch.Tensor", "clone"), ("torch.Tensor", "double"),
    ("torch.Tensor", "float"), ("torch.Tensor", "sum"), ("torch.Tensor", "max"), ("torch.Tensor", "norm"),
    ("torch.Tensor", "any"), ("torch.Tensor", "all"), ("torch.Tensor", "data_ptr"),
    ("torch.Tensor", "untyped_storage"), ("torch.Tensor", "detach"), ("torch.Tensor", "nonzero"),
    ("torch.Tensor", "copy_"), ("torch.Tensor", "fill_"), ("torch.Tensor", "isnan"),
    ("torch.cuda", "synchronize"), ("torch.cuda", "Event"), ("torch.cuda", "current_stream"),
    # the GPU launch count (calls.launch_tracker) opens a profile and reads its events: the class and the three
    # methods it goes through, so no candidate can report a launch it never made
    ("torch.profiler", "profile"), ("torch.profiler.profile", "__enter__"), ("torch.profiler.profile", "__exit__"),
    ("torch.profiler.profile", "events"),
    ("os", "urandom"), ("time", "perf_counter"), ("builtins", "isinstance"), ("builtins", "type"),
    ("builtins", "float"), ("builtins", "abs"), ("builtins", "max"), ("builtins", "min"),
    ("builtins", "len"), ("gc", "collect"),
)
# Modules whose whole namespace is guarded (the checker, the specs, the result types).
GUARDED_MODULE_PREFIXES = ("autokernel_ci.harness", "autokernel_ci.compare", "autokernel_ci.specs",
                           "autokernel_ci.kernelfile", "autokernel_ci.hardware", "autokernel_ci.torch_profile")
# Module attributes the interpreter itself rewrites (warnings registry): never evidence of tampering.
_IGNORED_KEYS = frozenset({"__warningregistry__"})

_MISSING = object()
# Private references, captured when the guard is imported (before any candidate).
_getattr, _id, _isinstance, _vars, _sorted = builtins.getattr, builtins.id, builtins.isinstance, builtins.vars, sorted
_gettrace, _getprofile = sys.gettrace, sys.getprofile
_urandom, _perf_counter, _collect = os.urandom, time.perf_counter, gc.collect


def _resolve(path: str) -> Any:
    head, *rest = path.split(".")
    obj = sys.modules.get(head)
    for part in rest:
        if obj is None:
            return None
        obj = _getattr(obj, part, None)
    return obj


def _mode_depths() -> tuple[int, int]:
    torch_c = sys.modules.get("torch._C")
    if torch_c is None:
        return (0, 0)
    return (int(torch_c._len_torch_function_stack()), int(torch_c._len_torch_dispatch_stack()))


@dataclass
class Snapshot:
    attributes: dict[str, tuple[Any, str, Any]] = field(default_factory=dict)
    modules: dict[str, tuple[ModuleType, dict[str, Any]]] = field(default_factory=dict)
    hooks: tuple[Any, Any] = (None, None)
    modes: tuple[int, int] = (0, 0)


def take_snapshot(extra_modules: Iterable[str] = ()) -> Snapshot:
    """Record what the checks depend on; call before importing a candidate."""
    snap = Snapshot(hooks=(_gettrace(), _getprofile()), modes=_mode_depths())
    for owner_path, name in GUARDED_ATTRIBUTES:
        owner = _resolve(owner_path)
        if owner is not None:
            snap.attributes[f"{owner_path}.{name}"] = (owner, name, _getattr(owner, name, _MISSING))
    names = [n for n in list(sys.modules) if n.startswith(GUARDED_MODULE_PREFIXES)] + list(extra_modules)
    for name in names:
        module = sys.modules.get(name)
        if _isinstance(module, ModuleType):
            snap.modules[name] = (module, dict(_vars(module)))
    return snap


def find_tampering(snap: Snapshot) -> list[str]:
    """Everything changed since `snap`, as readable lines; empty when nothing was touched."""
    changes: list[str] = []
    for label, (owner, name, value) in snap.attributes.items():
        if _getattr(owner, name, _MISSING) is not value:
            changes.append(f"{label} was replaced")
    for name, (module, namespace) in snap.modules.items():
        if sys.modules.get(name) is not module:
            changes.append(f"sys.modules[{name!r}] was replaced")
            continue
        current = _vars(module)
        for key, value in namespace.items():
            if key in _IGNORED_KEYS:
                continue
            if current.get(key, _MISSING) is not value:
                changes.append(f"{name}.{key} was replaced or deleted")
    if (_gettrace(), _getprofile()) != snap.hooks:
        changes.append("a sys.settrace/sys.setprofile hook was installed")
    if _mode_depths() != snap.modes:
        changes.append("a torch function/dispatch mode was left active")
    return changes
