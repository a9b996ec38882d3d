"""bench(): time a loaded candidate against eager and torch.compile at model shapes (runs in the worker)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import torch

from autokernel_ci.harness import baselines, roofline, timing
from autokernel_ci.harness.loader import Candidate
from autokernel_ci.harness.results import BenchResult, ShapeBench
from autokernel_ci.harness.stages import derive_seed, dtype_from_name
from autokernel_ci.specs import get_spec
from autokernel_ci.specs.base import CPU_SET, KernelSpec

# Input sets rotated between calls: the same tensors every call would let a kernel (or the cache)
# keep state across calls; three distinct sets is enough to break that and cheap to hold.
ROTATED_INPUT_SETS = 3
CPU_NOTE = ("CPU timings of Triton-interpreted kernels mean nothing (Python executes every program); "
            "they only prove the benchmark runs. Benchmark on the GPU.")
# torch.compile on CPU builds C++ with the host compiler (tens of seconds): off unless asked on CPU.
CPU_COMPILE_BASELINE = False


def default_shapes(spec: KernelSpec, device: torch.device) -> list[dict[str, Any]]:
    return spec.shapes("llama7b") if device.type == "cuda" else spec.shapes(CPU_SET)[:1]


def _rotating(fn: Callable[..., Any], input_sets: Sequence[tuple]) -> Callable[[], Any]:
    order = itertools.cycle(range(len(input_sets)))
    return lambda: fn(*input_sets[next(order)])


def bench_candidate(candidate: Candidate, *, device: str, shapes: Sequence[dict] | None = None,
                    dtypes: Sequence[Any] | None = None, compile_baseline: bool = True, eager_baseline: bool = True,
                    seed: int = 0, label: str | None = None) -> BenchResult:
    spec = get_spec(candidate.kernel.kernel_type)
    dev = torch.device(device)
    shapes = [dict(s) for s in shapes] if shapes else default_shapes(spec, dev)
    run_dtypes = [dtype_from_name(d) for d in dtypes] if dtypes else [spec.dtypes[0]]
    use_compile = compile_baseline and (dev.type == "cuda" or CPU_COMPILE_BASELINE)
    gpu = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    result = BenchResult(kernel=label or str(candidate.path), kernel_type=spec.name, backend=candidate.kernel.backend,
                         source_hash=candidate.kernel.source_hash, device=device, gpu=gpu)
    notes = []
    if dev.type != "cuda":
        notes.append(CPU_NOTE)
        if compile_baseline and not use_compile:
            notes.append("torch.compile baseline skipped on CPU (inductor's C++ build takes tens of seconds).")
    for dtype in run_dtypes:
        for n, shape in enumerate(shapes):
            result.rows.append(_bench_shape(candidate, spec, dev, shape, dtype, eager_baseline, use_compile,
                                            derive_seed(seed, "bench", n, dtype), result))
    result.note = " ".join(notes)
    if dev.type == "cuda":
        result.ceiling_source = roofline.ceiling(spec, run_dtypes[0]).source
    else:
        result.checks.setdefault("below_physical_floor", "skipped: no physical floor for CPU-interpreted kernels")
    return result


def _bench_shape(candidate, spec, dev, shape, dtype, eager_baseline, use_compile, seed, result) -> ShapeBench:
    gen = torch.Generator(device=dev).manual_seed(seed)
    input_sets = [spec.make_inputs(shape, dtype, dev, gen) for _ in range(ROTATED_INPUT_SETS)]
    fns = {"candidate": _rotating(candidate.fn, input_sets)}
    if eager_baseline:
        fns["eager"] = _rotating(baselines.eager(spec), input_sets)
    if use_compile:
        key = (tuple(sorted(shape.items())), str(dtype))
        fns["compiled"] = _rotating(baselines.compiled(spec, key), input_sets)
    timings = timing.time_calls(fns, dev)
    cand = timings["candidate"]
    row = ShapeBench(shape=dict(shape), dtype=str(dtype).removeprefix("torch."), candidate=cand,
                     eager=timings.get("eager"), compiled=timings.get("compiled"), metric=spec.primary_metric,
                     value=round(roofline.metric_value(spec, shape, dtype, cand.median_us), 3))
    for name, t in (("eager", row.eager), ("compile", row.compiled)):
        if t is not None:
            setattr(row, f"speedup_vs_{name}", round(t.median_us / cand.median_us, 4))
    if dev.type == "cuda":
        ceiling = roofline.ceiling(spec, dtype)
        row.pct_of_ceiling = round(100.0 * row.value / ceiling.value, 2)
        row.floor_us = round(roofline.floor_us(spec, shape, dtype), 3)
        problem = roofline.below_floor(spec, shape, dtype, cand.median_us)
        previous = result.checks.get("below_physical_floor", "pass")
        result.checks["below_physical_floor"] = f"fail: {problem}" if problem else previous
    return row
