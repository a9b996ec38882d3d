"""Load the user's model and example inputs from `FILE.py:CALLABLE` references.

A reference may carry literal keyword arguments, `FILE.py:build_model(size="7b")`: they are read
with `ast.literal_eval` (numbers, strings, booleans, None), never evaluated as code.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import nn

DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
DTYPE_NAMES: dict[torch.dtype, str] = {v: k for k, v in DTYPES.items()}
INPUTS_NAME = "example_inputs"  # looked up in the model's file when --inputs is not given


class LoadError(ValueError):
    """The model or inputs could not be loaded; the message names the reference and the fix."""


class ForwardError(RuntimeError):
    """The model's forward raised on the example inputs."""


@dataclass(frozen=True)
class Ref:
    path: Path
    name: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        return f"{self.path}:{self.name}" + (f"({args})" if self.kwargs else "")


def parse_ref(ref: str) -> Ref:
    """Split "FILE.py:NAME" or "FILE.py:NAME(key=literal, ...)" into its parts."""
    path_part, sep, call = ref.rpartition(":")
    if not sep or not path_part or not call:
        raise LoadError(f"{ref!r} is not FILE.py:CALLABLE; write e.g. model.py:build_model")
    name, paren, rest = call.partition("(")
    name = name.strip()
    kwargs: dict[str, Any] = {}
    if paren:
        try:
            node = ast.parse(f"f({rest}", mode="eval").body
        except SyntaxError as exc:
            raise LoadError(f"{ref!r}: cannot read the arguments ({exc.msg}); write NAME(key=value, ...)") from None
        if not isinstance(node, ast.Call) or node.args:
            raise LoadError(f"{ref!r}: only keyword arguments are accepted, e.g. build_model(size=\"7b\")")
        for kw in node.keywords:
            try:
                kwargs[str(kw.arg)] = ast.literal_eval(kw.value)
            except ValueError:
                raise LoadError(f"{ref!r}: argument {kw.arg}={ast.unparse(kw.value)} is not a literal; "
                                "only numbers, strings, booleans and None are accepted") from None
    if not name.isidentifier():
        raise LoadError(f"{ref!r}: {name!r} is not a Python name")
    return Ref(Path(path_part), name, kwargs)


def import_file(path: Path) -> ModuleType:
    """Import a Python file as a module, with its directory on sys.path (for its own imports)."""
    path = path.expanduser().resolve()
    if not path.is_file():
        raise LoadError(f"model file {path} does not exist; pass --model FILE.py:CALLABLE with an existing file")
    module_name = f"autokernel_user_{path.stem}_{abs(hash(str(path))) % 10**8}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise LoadError(f"{path} cannot be imported as a Python module (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the user's file: report whatever it raised
        del sys.modules[module_name]
        raise LoadError(f"importing {path} failed: {type(exc).__name__}: {exc}") from exc
    return module


def load_callable(ref: str | Ref) -> Callable[..., Any]:
    """The function or class named by `ref`, with the reference's keyword arguments bound."""
    r = parse_ref(ref) if isinstance(ref, str) else ref
    module = import_file(r.path)
    obj = getattr(module, r.name, None)
    if obj is None:
        public = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise LoadError(f"{r.path} has no {r.name!r}; callables there: {', '.join(public) or 'none'}")
    if not callable(obj):
        raise LoadError(f"{r}: {r.name} is a {type(obj).__name__}, not a function or class")
    return functools.partial(obj, **r.kwargs) if r.kwargs else obj


def build_model(ref: str, *, dtype: torch.dtype, device: torch.device | str) -> nn.Module:
    """Call the reference, check it gave an nn.Module, and put it in eval mode on device/dtype."""
    factory = load_callable(ref)
    try:
        model = factory()
    except torch.OutOfMemoryError:
        raise
    except Exception as exc:
        raise LoadError(f"calling {ref} failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, nn.Module):
        raise LoadError(f"{ref} returned a {type(model).__name__}, not a torch.nn.Module; "
                        "point --model at a function or class that builds the model")
    return model.eval().to(device=device, dtype=dtype)


def build_inputs(model_ref: str, inputs_ref: str | None, *, dtype: torch.dtype,
                 device: torch.device | str) -> tuple[Any, ...] | dict[str, Any]:
    """Example inputs from --inputs, else from the model file's `example_inputs`.

    Without --inputs, `example_inputs` receives those of the model reference's keyword arguments it
    accepts (so `build_model(size="7b")` gets `example_inputs(size="7b")`). Floating tensors are
    cast to `dtype`; every tensor moves to `device`.
    """
    if inputs_ref is not None:
        fn, where = load_callable(inputs_ref), inputs_ref
    else:
        r = parse_ref(model_ref)
        module = import_file(r.path)
        fn = getattr(module, INPUTS_NAME, None)
        if fn is None or not callable(fn):
            raise LoadError(f"no inputs: pass --inputs FILE.py:CALLABLE or define {INPUTS_NAME}() in {r.path}")
        accepted = inspect.signature(fn).parameters
        fn = functools.partial(fn, **{k: v for k, v in r.kwargs.items() if k in accepted})
        where = f"{r.path}:{INPUTS_NAME}"
    try:
        raw = fn()
    except Exception as exc:
        raise LoadError(f"calling {where} failed: {type(exc).__name__}: {exc}") from exc
    if isinstance(raw, torch.Tensor):
        raw = (raw,)
    if isinstance(raw, dict):
        return {k: to_device(v, dtype, device) for k, v in raw.items()}
    if not isinstance(raw, list | tuple):
        raise LoadError(f"{where} returned a {type(raw).__name__}; return a tuple of tensors (or a dict of kwargs)")
    return tuple(to_device(v, dtype, device) for v in raw)


def to_device(value: Any, dtype: torch.dtype, device: torch.device | str) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device=device, dtype=dtype if value.is_floating_point() else value.dtype)
    return value


def describe_inputs(inputs: tuple[Any, ...] | dict[str, Any]) -> str:
    items = inputs.items() if isinstance(inputs, dict) else enumerate(inputs)
    parts = []
    for k, v in items:
        desc = f"{tuple(v.shape)} {str(v.dtype).removeprefix('torch.')}" if isinstance(v, torch.Tensor) \
            else type(v).__name__
        parts.append(f"{k}: {desc}")
    return "[" + ", ".join(parts) + "]"


def call_model(model: nn.Module, inputs: tuple[Any, ...] | dict[str, Any]) -> Any:
    return model(**inputs) if isinstance(inputs, dict) else model(*inputs)


def run_forward(model: nn.Module, inputs: tuple[Any, ...] | dict[str, Any]) -> Any:
    """One forward pass; a failure names the input shapes so a mismatch is easy to see."""
    try:
        with torch.no_grad():
            return call_model(model, inputs)
    except torch.OutOfMemoryError:
        raise
    except Exception as exc:
        raise ForwardError(f"the model's forward failed on inputs {describe_inputs(inputs)}: "
                           f"{type(exc).__name__}: {exc}; check that --inputs matches the model "
                           "(shapes, dtypes, argument order)") from exc
