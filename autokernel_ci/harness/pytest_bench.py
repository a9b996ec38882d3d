"""pytest-benchmark support: `kernel_benchmark(fn, *args)` times GPU kernels correctly.

pytest-benchmark times with a host clock; a CUDA launch returns before the kernel runs, so a naive
`benchmark(fn, x)` measures launch overhead. Here every round flushes the L2 (untimed setup), calls
the kernel and synchronises the device inside the timed region, one call per round. The JSON of
`pytest --benchmark-only --benchmark-json out.json` is what github-action-benchmark tracks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from autokernel_ci.harness import timing

# Rounds per benchmark: GPU kernels take microseconds (100 rounds ~ ms); CPU-interpreted ones take
# tens of milliseconds (a handful of rounds).
ROUNDS = {"cuda": 100, "cpu": 5}
WARMUP_ROUNDS = {"cuda": 10, "cpu": 1}


def _device_of(args: tuple[Any, ...]) -> torch.device:
    return next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))


class KernelBenchmark:
    def __init__(self, benchmark: Any) -> None:
        self.benchmark = benchmark

    def __call__(self, fn: Callable[..., Any], *args: Any, rounds: int | None = None,
                 warmup_rounds: int | None = None, bytes_moved: float | None = None,
                 flops: float | None = None) -> Any:
        device = _device_of(args)
        kind = "cuda" if device.type == "cuda" else "cpu"

        def setup() -> None:
            if device.type == "cuda":
                timing._flush_l2(device)
                torch.cuda.synchronize(device)

        def target() -> Any:
            out = fn(*args)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return out

        result = self.benchmark.pedantic(target, setup=setup, rounds=rounds or ROUNDS[kind], iterations=1,
                                         warmup_rounds=WARMUP_ROUNDS[kind] if warmup_rounds is None else warmup_rounds)
        stats = getattr(self.benchmark, "stats", None)
        median_s = getattr(getattr(stats, "stats", None), "median", None)
        info = self.benchmark.extra_info
        info["device"] = str(device)
        if median_s:
            if bytes_moved:
                info["GB/s"] = float(f"{bytes_moved / median_s / 1e9:.4g}")
            if flops:
                info["TFLOP/s"] = float(f"{flops / median_s / 1e12:.4g}")
        if device.type != "cuda":
            info["note"] = "CPU-interpreted Triton: the timing means nothing"
        return result
