"""Ceilings (for % of peak) and physical floors (to reject impossible timings), per GPU.

Reads autokernel_ci.hardware (gpu_specs, detection, roofline) for the detected GPU; for a GPU it
does not know (or on CPU), a local table of the H200 numbers measured for DESIGN.md §9. Two different bounds on purpose:
- the *ceiling* is what the best kernel can reach (measured copy bandwidth, cuBLAS-class GEMM);
- the *floor* is a time no kernel can beat (datasheet bandwidth and peak, above every measured
  figure), so a kernel is rejected only when it claims the physically impossible.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from autokernel_ci.specs.base import KernelSpec, Shape

# DESIGN.md §9, measured on the H200: copy 4269 GB/s, cuBLAS bf16 GEMM 660-690 TFLOP/s.
FALLBACK_CEILING_GBS = 4269.0
FALLBACK_CEILING_TFLOPS = {torch.bfloat16: 690.0, torch.float16: 690.0, torch.float32: 345.0}  # fp32 via tf32
# Floors: H200 datasheet 4.8 TB/s and dense bf16 989.5 TFLOP/s (tf32 494.5): no kernel beats these.
FLOOR_BANDWIDTH_GBS = 4800.0
FLOOR_TFLOPS = {torch.bfloat16: 989.5, torch.float16: 989.5, torch.float32: 494.5}
FALLBACK_SOURCE = "fallback:h200-measured (autokernel_ci.hardware not available)"


@dataclass(frozen=True)
class Ceiling:
    value: float  # GB/s or TFLOP/s
    metric: str
    source: str


_detected: list = []


def _gpu():
    """(hardware module, GpuSpec) for the current device, or (None, None); detected once per process."""
    if not _detected:
        try:
            from autokernel_ci import hardware

            gpu = hardware.detect() if torch.cuda.is_available() else None
            _detected.append((hardware, gpu) if gpu is not None else (None, None))
        except Exception:  # noqa: BLE001 - no hardware module or an unknown GPU: the local table applies
            _detected.append((None, None))
    return _detected[0]


def ceiling(spec: KernelSpec, dtype: torch.dtype) -> Ceiling:
    hw, gpu = _gpu()
    if hw is not None:
        try:
            value = hw.ceiling(spec.primary_metric, dtype, gpu)
            if value:
                return Ceiling(float(value), spec.primary_metric, f"gpu_specs:{gpu.key}")
        except Exception:  # noqa: BLE001 - a hardware-module problem must not stop a benchmark
            pass
    if spec.primary_metric == "GB/s":
        return Ceiling(FALLBACK_CEILING_GBS, "GB/s", FALLBACK_SOURCE)
    return Ceiling(FALLBACK_CEILING_TFLOPS.get(dtype, FALLBACK_CEILING_TFLOPS[torch.bfloat16]), "TFLOP/s",
                   FALLBACK_SOURCE)


def floor_us(spec: KernelSpec, shape: Shape, dtype: torch.dtype) -> float:
    """The least time any kernel needs for this problem (bytes/bandwidth and flops/peak, larger), from
    the *datasheet* figures of the detected GPU (never the measured ones: a kernel may beat a
    measured copy by a few percent, it cannot beat the datasheet)."""
    flops, nbytes = spec.flops(shape), spec.bytes_moved(shape, dtype)
    bandwidth, peak = FLOOR_BANDWIDTH_GBS, FLOOR_TFLOPS.get(dtype, FLOOR_TFLOPS[torch.float32])
    hw, gpu = _gpu()
    if hw is not None:
        try:
            bandwidth = float(gpu.bandwidth_gbs)
            peak = float(gpu.peak(hw.dtype_key(dtype)) or 0.0) or peak
        except Exception:  # noqa: BLE001
            pass
    return max(nbytes / (bandwidth * 1e9) * 1e6, flops / (peak * 1e12) * 1e6)


def metric_value(spec: KernelSpec, shape: Shape, dtype: torch.dtype, median_us: float) -> float:
    if median_us <= 0:
        return 0.0
    if spec.primary_metric == "GB/s":
        return spec.bytes_moved(shape, dtype) / (median_us * 1e-6) / 1e9
    return spec.flops(shape) / (median_us * 1e-6) / 1e12


def below_floor(spec: KernelSpec, shape: Shape, dtype: torch.dtype, median_us: float) -> str | None:
    """A readable rejection when `median_us` beats physics, else None."""
    floor = floor_us(spec, shape, dtype)
    if median_us < floor:
        return (f"measured {median_us:.2f} us but the physical floor for {spec.describe_shape(shape)} "
                f"{str(dtype).removeprefix('torch.')} is {floor:.2f} us (bytes/bandwidth, flops/peak): the timing "
                "missed work (side stream, skipped rows, cached result) - a measurement bug, not a speedup")
    return None
