"""Timing: CUDA events around each call, L2 flushed between calls, implementations interleaved.

All implementations being compared (candidate, eager, torch.compile) are timed in ONE loop, their
order rotated every round (A B C, B C A, C A B, ...), so clock and thermal drift hit all of them
alike. Each sample is one call: events recorded on the current stream right before and after it,
after a 256 MB write that evicts the L2 (H100/H200 L2 is 50-60 MB), so every call reads from HBM
as it does inside a model. Statistics: median with p20/p80.

The events time GPU work only while the host stays ahead of the GPU. Without help it does not always:
a loop that also calls eager (rotary: ~10 aten launches) and a torch.compile'd function spends more
host time per round than the GPU spends flushing and computing, the GPU queue drains, and each sample
becomes the host's launch latency. Seen on the H200 (GPT-2 shapes, fp16): the search loop timed the
layernorm starter at 49.0 us and rotary's eager at 158.8 us, 13.9 and 67.2 us by do_bench. So a
GPU-side spin of LEAD_US comes after each flush: the host queues the call while the GPU still spins,
and the events see the kernels back to back, as in a model whose host runs ahead.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from autokernel_ci.harness.results import Timing

L2_FLUSH_BYTES = 256 * 1024 * 1024  # > 4x the largest L2 we target (H200: 60 MB as torch reports it)
# Host head start per timed call: more than the host time of one eager rotary (~160 us measured) minus the
# flush's own ~80 us on the GPU; it adds 0.2 ms a sample of wall time, not of measured time.
LEAD_US = 200.0
_perf_counter = time.perf_counter


@dataclass(frozen=True)
class TimingPlan:
    warmup: int  # untimed calls per implementation (Triton/compile caches, allocator warm)
    min_samples: int
    max_samples: int
    budget_s: float  # wall time aimed at per implementation, measured calls only


PLANS = {
    # GPU: 25-200 samples; a 35 us kernel reaches 200 samples in ~20 ms, a 5 ms GEMM stops at 0.3 s.
    "cuda": TimingPlan(warmup=3, min_samples=25, max_samples=200, budget_s=0.3),
    # CPU: interpreted Triton is ~1000x slower than the GPU; a few samples only (the numbers mean nothing).
    "cpu": TimingPlan(warmup=1, min_samples=3, max_samples=15, budget_s=0.3),
}

_flush_buffers: dict[str, torch.Tensor] = {}


def _flush_l2(device: torch.device) -> None:
    key = str(device)
    buf = _flush_buffers.get(key)
    if buf is None:
        buf = _flush_buffers[key] = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device=device)
    buf.zero_()


def _lead_cycles() -> int:
    """torch.cuda._sleep cycles that last ~LEAD_US on the current device now. Measured per timing loop, after the
    warm-up calls: a count taken once at a low SM clock would shrink the lead at boost clock."""
    probe = 1_000_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(probe)  # the first call loads the kernel
    start.record()
    torch.cuda._sleep(probe)
    end.record()
    end.synchronize()
    return max(1, int(probe * LEAD_US / max(start.elapsed_time(end) * 1000.0, 1.0)))


def summarize(samples_us: list[float]) -> Timing:
    """Median and the 20th/80th percentiles (linear interpolation between order statistics)."""
    if not samples_us:
        raise ValueError("no timing samples: time at least one call")
    xs = sorted(samples_us)

    def pct(q: float) -> float:
        pos = q * (len(xs) - 1)
        lo = int(pos)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)

    return Timing(median_us=round(pct(0.5), 3), p20_us=round(pct(0.2), 3), p80_us=round(pct(0.8), 3),
                  samples=len(xs))


def time_calls(fns: Mapping[str, Callable[[], object]], device: torch.device, *, samples: int | None = None,
               warmup: int | None = None, plan: TimingPlan | None = None, lead: bool = True) -> dict[str, Timing]:
    """Time each zero-argument callable, interleaved; returns name -> Timing. lead=False drops the GPU-side
    head start (see the module docstring): then a host-bound call is timed at its launch latency."""
    plan = plan or PLANS["cuda" if device.type == "cuda" else "cpu"]
    names = list(fns)
    warmup = plan.warmup if warmup is None else warmup
    for name in names:
        for _ in range(warmup):
            fns[name]()
    if samples is None:
        samples = _choose_samples(fns, device, plan)
    if device.type == "cuda":
        return _time_cuda(fns, names, device, samples, lead)
    return _time_host(fns, names, samples)


def _choose_samples(fns: Mapping[str, Callable[[], object]], device: torch.device, plan: TimingPlan) -> int:
    slowest = 0.0
    for fn in fns.values():
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = _perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        slowest = max(slowest, _perf_counter() - t0)
    fit = int(plan.budget_s / max(slowest, 1e-6))
    return max(plan.min_samples, min(plan.max_samples, fit))


def _rotation(names: list[str], i: int) -> list[str]:
    k = i % len(names)
    return names[k:] + names[:k]


def _time_cuda(fns, names, device, samples: int, lead: bool = True) -> dict[str, Timing]:
    with torch.cuda.device(device):  # events, the spin and the flush on the device being timed
        cycles = _lead_cycles() if lead else 0
        events = {n: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                      for _ in range(samples)] for n in names}
        torch.cuda.synchronize(device)
        for i in range(samples):
            for name in _rotation(names, i):
                _flush_l2(device)
                if cycles:
                    torch.cuda._sleep(cycles)
                start, end = events[name][i]
                start.record()
                fns[name]()
                end.record()
        torch.cuda.synchronize(device)
    return {n: summarize([s.elapsed_time(e) * 1000.0 for s, e in events[n]]) for n in names}


def _time_host(fns, names, samples: int) -> dict[str, Timing]:
    out: dict[str, list[float]] = {n: [] for n in names}
    for i in range(samples):
        for name in _rotation(names, i):
            t0 = _perf_counter()
            fns[name]()
            out[name].append((_perf_counter() - t0) * 1e6)
    return {n: summarize(v) for n, v in out.items()}
