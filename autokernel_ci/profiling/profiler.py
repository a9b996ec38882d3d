"""Run the model under torch.profiler and count each microsecond of device time once.

GPU: the time of every kernel, attributed to the operator that launched it (CUDA activity).
CPU: the self CPU time of every operator (an aten op's self time excludes the ops it calls, so
`aten::linear` -> `aten::addmm` is not counted twice).

Each event is also attributed to the nn.Module calls it ran inside: forward pre/post hooks open a
`record_function` scope per module call, and the scope chain of every event is read back from the
profiler's event tree.
"""

from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.autograd import DeviceType

from autokernel_ci.profiling.loading import call_model
from autokernel_ci.torch_profile import torch_profile

SCOPE_PREFIX = "autokernel.module/"
OP_NAME = re.compile(r"^[A-Za-z_]\w*::\w+")  # aten::addmm, autokernel::rmsnorm_0; not cudaLaunchKernel
# The profiled sum may differ from the measured forward time by this fraction before we warn: on
# GPU kernels run back to back in a GPU-bound model (gaps < 10%); on CPU the Python between ops is
# not operator time and the profiler adds ~1-2 us per op, so a compute-bound model stays within 25%.
TIME_SUM_TOLERANCE = {"cuda": 0.10, "cpu": 0.25}
WARMUP_RUNS = 2
# A profiled CPU pass of a small model is short (llama small: ~14 ms, ~85% of it inside operators):
# one scheduler preemption of a few ms that lands between operators on a loaded machine lowers the
# pass's coverage by 10-25% without any accounting error. Load only ever adds time outside the
# operators' share, so a pass out of tolerance is profiled again, up to this many passes in all,
# and the pass whose coverage is closest to 1 is kept (a real double count or drop shows in every pass).
PROFILE_PASSES = 3
TIMING_MIN_RUNS, TIMING_MAX_RUNS, TIMING_BUDGET_S = 3, 50, 1.0


@dataclass
class ModuleCall:
    index: int
    path: str  # dotted name from model.named_modules(); "" for the model itself
    cls: str
    arg_shapes: list[list[int] | None]  # positional args: tensor shapes (None for non-tensors)


@dataclass
class AtenCall:
    name: str
    shapes: list[Any]  # record_shapes input shapes, one entry per argument
    concrete: list[Any]  # concrete scalar inputs where the profiler recorded them
    key: int = 0  # identifies the profiler event: events under the same operator call share it


@dataclass
class OpEvent:
    seq: int
    chain: list[AtenCall]  # enclosing operators, outermost first; chain[-1] is the event itself
    time_us: float
    module_calls: list[int]  # indices into Profile.module_calls, innermost first
    kernels: list[str] = field(default_factory=list)  # GPU kernel names launched by this op

    @property
    def leaf(self) -> str:
        return self.chain[-1].name


@dataclass
class Profile:
    device: str
    dtype: torch.dtype
    events: list[OpEvent]
    module_calls: list[ModuleCall]
    modules: dict[str, nn.Module]
    model_time_us: float  # median measured forward time, without the profiler
    profiled_time_us: float  # sum of event times (each microsecond once)
    profiled_wall_us: float  # wall time of the profiled forward pass itself
    unattributed_us: float = 0.0  # GPU kernel time no operator claimed (counted, as "other")
    passes: int = 1  # profiled passes taken to get one within TIME_SUM_TOLERANCE (at most PROFILE_PASSES)

    @property
    def coverage(self) -> float:
        """Profiled time over the wall time of the same pass: on a shared machine, load that slows
        one pass and not another would otherwise show up as a (false) accounting error."""
        return self.profiled_time_us / self.profiled_wall_us if self.profiled_wall_us else 0.0

    def time_sum_ok(self) -> bool:
        return abs(self.coverage - 1.0) <= TIME_SUM_TOLERANCE.get(self.device, 0.25)


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def measure_us(fn: Callable[[], Any], device: str, *, min_runs: int = TIMING_MIN_RUNS,
               max_runs: int = TIMING_MAX_RUNS, budget_s: float = TIMING_BUDGET_S) -> float:
    """Median wall time of fn() in microseconds (synchronised), over as many runs as fit the budget."""
    samples: list[float] = []
    start = time.perf_counter()
    while len(samples) < max_runs and (len(samples) < min_runs or time.perf_counter() - start < budget_s):
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples)


class _ModuleScopes:
    """Forward hooks that open one profiler scope per module call and remember its argument shapes."""

    def __init__(self, model: nn.Module):
        self.calls: list[ModuleCall] = []
        self.paths = {id(m): name for name, m in model.named_modules()}
        self.modules = dict(model.named_modules())
        self._stack: list[Any] = []
        self._handles = []
        for m in self.modules.values():
            self._handles.append(m.register_forward_pre_hook(self._enter))
            self._handles.append(m.register_forward_hook(self._exit))

    def _enter(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        call = ModuleCall(len(self.calls), self.paths.get(id(module), "?"), type(module).__name__,
                          [list(a.shape) if isinstance(a, torch.Tensor) else None for a in args])
        self.calls.append(call)
        scope = torch.autograd.profiler.record_function(f"{SCOPE_PREFIX}{call.index}")
        scope.__enter__()
        self._stack.append(scope)

    def _exit(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if self._stack:
            self._stack.pop().__exit__(None, None, None)

    def close(self) -> None:
        while self._stack:  # a forward that raised leaves scopes open
            self._stack.pop().__exit__(None, None, None)
        for h in self._handles:
            h.remove()


def _chain(evt: Any) -> tuple[list[AtenCall], list[int]]:
    ops: list[AtenCall] = []
    scopes: list[int] = []
    node = evt
    while node is not None:
        name = node.name
        if name.startswith(SCOPE_PREFIX):
            scopes.append(int(name[len(SCOPE_PREFIX):]))
        elif OP_NAME.match(name):
            ops.append(AtenCall(name, list(node.input_shapes or []),
                                list(getattr(node, "concrete_inputs", None) or []), id(node)))
        node = node.cpu_parent
    return ops[::-1], scopes


def profile_forward(model: nn.Module, inputs: Any, *, device: str, dtype: torch.dtype) -> Profile:
    """Warm up, time the forward without the profiler, then profile one forward pass (up to PROFILE_PASSES
    passes when one's operator time is out of tolerance, keeping the pass closest to full coverage)."""
    with torch.no_grad():
        for _ in range(WARMUP_RUNS):
            call_model(model, inputs)
        model_time = measure_us(lambda: call_model(model, inputs), device)
    best = _profile_pass(model, inputs, device=device, dtype=dtype, model_time=model_time)
    for attempt in range(2, PROFILE_PASSES + 1):
        if best.time_sum_ok():
            break
        again = _profile_pass(model, inputs, device=device, dtype=dtype, model_time=model_time)
        if abs(again.coverage - 1.0) < abs(best.coverage - 1.0):
            best = again
        best.passes = attempt
    return best


def device_work_us(evt: Any) -> float:
    """Time of a device-side profiler event that is real work (a kernel, memcpy, memset), else 0.

    Our per-module record_function scopes reappear on the GPU timeline as user annotations that span
    their kernels: counting them too made a 7B LLaMA forward add up to 236% of its time on the H200."""
    if evt.device_type == DeviceType.CPU or getattr(evt, "is_user_annotation", False):
        return 0.0
    return float(evt.time_range.elapsed_us())


def _profile_pass(model: nn.Module, inputs: Any, *, device: str, dtype: torch.dtype, model_time: float) -> Profile:
    """Profile one forward pass and count each microsecond of operator (GPU: kernel) time once."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    scopes = _ModuleScopes(model)
    try:
        with torch.no_grad(), torch_profile(activities, record_shapes=True) as prof:
            synchronize(device)
            t0 = time.perf_counter()
            call_model(model, inputs)
            synchronize(device)
            wall = (time.perf_counter() - t0) * 1e6
    finally:
        scopes.close()
    events: list[OpEvent] = []
    attributed = device_total = 0.0
    for evt in sorted(prof.events(), key=lambda e: e.time_range.start):
        if evt.device_type != DeviceType.CPU:
            device_total += device_work_us(evt)
            continue
        if evt.is_async or not OP_NAME.match(evt.name):
            continue
        if device == "cuda":
            kernels = [k.name for k in evt.kernels]
            t = float(sum(k.duration for k in evt.kernels))
            attributed += t
        else:
            kernels, t = [], float(evt.self_cpu_time_total)
        if t <= 0:
            continue
        chain, module_calls = _chain(evt)
        events.append(OpEvent(len(events), chain, t, module_calls, kernels))
    unattributed = max(device_total - attributed, 0.0) if device == "cuda" else 0.0
    total = sum(e.time_us for e in events) + unattributed
    return Profile(device, dtype, events, scopes.calls, scopes.modules, model_time, total, wall, unattributed)
