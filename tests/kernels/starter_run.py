"""Running a Triton starter (kernels/triton/<type>.py) the way the harness would, for the tests that check them.

`run_and_check` calls kernel_fn with every tensor it allocates filled with NaN (an unwritten element fails), every
aten op it calls checked against the spec's allow-list, its output compared with the spec's high-precision reference
and its inputs checked unmodified and unaliased. `run_spied` does that with named @triton.jit kernels of the starter
replaced by spies that record each launch's arguments (which kernel ran, at what tile, how many times).

Shared by tests/kernels/test_triton_*.py and tests/kernels/sm90_compile.py (thus benchmarks/sm90_costs.py): a helper
module, not a test module, so importing it collects no tests.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import uuid
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from autokernel_ci.compare import compare
from autokernel_ci.specs import get_spec

KERNELS_DIR = Path(__file__).resolve().parents[2] / "kernels" / "triton"
DEVICE = torch.device(os.environ.get("AUTOKERNEL_TEST_DEVICE", "cpu"))


def load_fresh(path: Path):
    """A new module object for a kernel file, under a unique name (a test that patches it leaves the cached one be)."""
    name = f"_starter_{path.stem}_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # triton.jit reads the defining module's globals through sys.modules
    spec.loader.exec_module(module)
    return module


_MODULES: dict[str, object] = {}


def starter_module(kernel_type: str):
    """The starter of a type, imported once per process and shared by the tests (Triton compiles each kernel once)."""
    if kernel_type not in _MODULES:
        _MODULES[kernel_type] = load_fresh(KERNELS_DIR / f"{kernel_type}.py")
    return _MODULES[kernel_type]


# Triton's CPU interpreter writes kernel results back into the tensors through aten::set_; on a GPU
# a launch issues no aten op at all.
INTERPRETER_OPS = frozenset({"set_"}) if DEVICE.type == "cpu" else frozenset()
_ALLOCATING_OPS = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided")


class PoisonAndRecord(TorchDispatchMode):
    """What the harness does around a candidate: NaN-filled allocations and a record of the aten ops."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.ops.add(name)
        out = func(*args, **(kwargs or {}))
        if name in _ALLOCATING_OPS and isinstance(out, torch.Tensor):
            out.fill_(float("nan") if out.is_floating_point() else -1)
        return out


def _storage_span(t: torch.Tensor) -> tuple[int, int]:
    start = t.untyped_storage().data_ptr()
    return start, start + t.untyped_storage().nbytes()


def run_and_check(module, kernel_type: str, inputs: tuple, dtype: torch.dtype) -> torch.Tensor:
    spec = get_spec(kernel_type)
    ref = spec.run_reference(inputs)
    before = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    with PoisonAndRecord() as mode:
        out = module.kernel_fn(*inputs)
    disallowed = mode.ops - spec.allowed_aten - INTERPRETER_OPS
    assert not disallowed, f"{kernel_type}: kernel_fn called aten ops outside the spec's allow-list: {disallowed}"
    expect = spec.output_dtype or dtype
    failure = compare(out, ref, spec.tolerances[dtype], expect_dtype=expect)
    assert failure is None, f"{kernel_type} {dtype}: {failure}"
    for x, x0 in zip(inputs, before, strict=True):
        if isinstance(x, torch.Tensor):
            assert torch.equal(x, x0), f"{kernel_type}: kernel_fn modified an input"
            lo, hi = _storage_span(x)
            o_lo, o_hi = _storage_span(out)
            assert o_hi <= lo or o_lo >= hi, f"{kernel_type}: output aliases an input"
    return out


def make_inputs(kernel_type: str, shape: dict, dtype: torch.dtype, seed: int = 0) -> tuple:
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    return get_spec(kernel_type).make_inputs(shape, dtype, DEVICE, gen)


HOPPER = DEVICE.type == "cuda" and torch.cuda.get_device_capability(DEVICE)[0] == 9


class LaunchSpy:
    """Stands in for a @triton.jit (or gluon.jit) kernel: records each launch's keyword arguments (and, in `args`,
    its positional ones), then launches."""

    def __init__(self, kernel) -> None:
        self.kernel = kernel
        self.launches: list[dict] = []
        self.args: list[tuple] = []

    def __getitem__(self, grid):
        launcher = self.kernel[grid]

        def launch(*args, **kwargs):
            self.launches.append(kwargs)
            self.args.append(args)
            return launcher(*args, **kwargs)

        return launch


def run_spied(kernel_type: str, config: dict, kernel_names: tuple[str, ...], cases: list[tuple],
              dtype) -> dict[str, LaunchSpy]:
    """Run a starter with `config` on each case (checked against the reference), its named kernels spied on:
    the spy of each kernel, by name."""
    module = starter_module(kernel_type)
    saved_config = module.CONFIG
    saved = {name: getattr(module, name) for name in kernel_names}
    spies = {name: LaunchSpy(kernel) for name, kernel in saved.items()}
    module.CONFIG = {**saved_config, **config}
    for name, spy in spies.items():
        setattr(module, name, spy)
    try:
        for inputs in cases:
            run_and_check(module, kernel_type, inputs, dtype)
    finally:
        module.CONFIG = saved_config
        for name, kernel in saved.items():
            setattr(module, name, kernel)
    return spies


def run_with_spies(kernel_type: str, config: dict, kernel_names: tuple[str, ...], cases: list[tuple],
                   dtype) -> dict[str, list[dict]]:
    """run_spied's launches of each kernel (their keyword arguments), by name."""
    spies = run_spied(kernel_type, config, kernel_names, cases, dtype)
    return {name: spy.launches for name, spy in spies.items()}


# Every kernel the launcher of a starter with a Gluon variant may pick, so a count shows which one ran and that
# nothing ran after it (a fall-through past the Gluon launch would show as a second kernel).
LAUNCHABLE = {
    "flash_attention": ("_attn_fwd_gluon_ws", "_attn_fwd_tma", "_attn_fwd"),
    "fused_mlp": ("_gate_up_gluon", "_gate_up_tma", "_gate_up_kernel"),
    "matmul": ("_matmul_gluon", "_matmul_tma", "_matmul_tma_persistent", "_matmul_tiled", "_matmul_persistent"),
}


def launch_counts(kernel_type: str, config: dict, cases: list, dtype: torch.dtype) -> dict[str, int]:
    """run_with_spies over every kernel of LAUNCHABLE[kernel_type]: the launches of those that ran, by name."""
    launches = run_with_spies(kernel_type, config, LAUNCHABLE[kernel_type], cases, dtype)
    return {name: len(calls) for name, calls in launches.items() if calls}
