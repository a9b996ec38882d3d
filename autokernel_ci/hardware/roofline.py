"""The roofline: the one place that turns a GPU (and optionally a calibration) into ceilings,
physical floors, memory/compute classification and "% of ceiling".

Units throughout: bandwidth in GB/s (1e9 bytes/s), compute in TFLOP/s (1e12/s; TOPS for int8),
times in microseconds. Ceilings prefer, per quantity: a calibration measured now, then the spec
file's `measured:` section, then the datasheet.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from autokernel_ci.hardware.calibrate import Calibration
from autokernel_ci.hardware.specs import GpuSpec, dtype_key

MEMORY, COMPUTE, UNKNOWN = "memory", "compute", "unknown"
METRICS = ("GB/s", "TFLOP/s")
# A bf16 GEMM measurement also bounds these dtypes: they run on the same tensor-core path at the
# same datasheet rate on every GPU in gpu_specs/ (checked per GPU before it is applied).
_GEMM_PIPE_DTYPES = ("bf16", "fp16")


@dataclass(frozen=True)
class Ceilings:
    """What one device can reach for one dtype. Unpacks as (bandwidth_gbs, peak_tflops)."""

    dtype: str
    bandwidth_gbs: float
    peak_tflops: float | None  # None: the GPU has no such unit, or nothing known
    bandwidth_source: str  # "calibrated" | "measured:<date>" | "datasheet:<key>"
    compute_source: str

    def __iter__(self) -> Iterator[Any]:
        yield self.bandwidth_gbs
        yield self.peak_tflops

    @property
    def ridge(self) -> float | None:
        """Arithmetic intensity (FLOP/byte) where the memory and compute roofs meet."""
        if self.peak_tflops is None:
            return None
        return self.peak_tflops * 1e12 / (self.bandwidth_gbs * 1e9)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ridge": self.ridge}


def ceilings(gpu: GpuSpec | None, dtype: Any, calibration: Calibration | None = None) -> Ceilings | None:
    """Bandwidth and peak for `dtype` on `gpu`; None when neither a spec nor a calibration exists."""
    key = dtype_key(dtype)
    if gpu is None and calibration is None:
        return None
    if gpu is not None and calibration is not None and calibration.spec_key not in (None, gpu.key):
        raise ValueError(f"calibration was measured on {calibration.device_name!r} ({calibration.spec_key}), "
                         f"not on {gpu.key}: re-run `autokernel-ci gpu --calibrate` on this GPU")
    gemm_applies = key in _GEMM_PIPE_DTYPES and (gpu is None or gpu.peak(key) == gpu.peak("bf16"))

    if calibration is not None:
        bw, bw_src = calibration.copy_gbs, "calibrated"
    elif gpu.measured and gpu.measured.copy_gbs:
        bw, bw_src = gpu.measured.copy_gbs, f"measured:{gpu.measured.date}"
    else:
        bw, bw_src = gpu.bandwidth_gbs, f"datasheet:{gpu.key}"

    if calibration is not None and gemm_applies:
        peak, peak_src = calibration.gemm_tflops, "calibrated"
    elif gpu is not None and gemm_applies and gpu.measured and gpu.measured.gemm_bf16_tflops:
        peak, peak_src = gpu.measured.gemm_bf16_tflops, f"measured:{gpu.measured.date}"
    elif gpu is not None:
        peak, peak_src = gpu.peak(key), f"datasheet:{gpu.key}"
    else:
        peak, peak_src = None, "unknown"  # unknown GPU: only the calibrated bf16/fp16 rate is known
    if peak is None:
        peak_src = "none"
    return Ceilings(key, float(bw), None if peak is None else float(peak), bw_src, peak_src)


def floor_us(flops: float, bytes_moved: float, ceil: Ceilings) -> float:
    """The physical floor: max(bytes / bandwidth, flops / peak), in microseconds. With no compute
    peak the memory term alone is still a true lower bound."""
    if flops < 0 or bytes_moved < 0:
        raise ValueError(f"flops ({flops}) and bytes ({bytes_moved}) must be >= 0: they come from the spec's models")
    memory_us = bytes_moved / (ceil.bandwidth_gbs * 1e3)  # bytes / (GB/s * 1e9) * 1e6
    compute_us = flops / (ceil.peak_tflops * 1e6) if ceil.peak_tflops else 0.0  # flops / (TF * 1e12) * 1e6
    return max(memory_us, compute_us)


def bound(flops: float, bytes_moved: float, ceil: Ceilings) -> str:
    """'memory' or 'compute' by the ridge point; 'unknown' when compute matters but no peak is known."""
    if flops <= 0:
        return MEMORY
    if ceil.ridge is None:
        return UNKNOWN
    if bytes_moved <= 0:
        return COMPUTE
    return COMPUTE if flops / bytes_moved >= ceil.ridge else MEMORY


def roofline_floor_us(flops: float, bytes_moved: float, dtype: Any, gpu: GpuSpec | None,
                      calibration: Calibration | None = None) -> tuple[float | None, str]:
    """(floor_us, bound) for an op; (None, 'unknown') without a spec or calibration."""
    ceil = ceilings(gpu, dtype, calibration)
    if ceil is None:
        return None, UNKNOWN
    return floor_us(flops, bytes_moved, ceil), bound(flops, bytes_moved, ceil)


def ceiling(metric: str, dtype: Any, gpu: GpuSpec | None, calibration: Calibration | None = None) -> float | None:
    """The ceiling in `metric` units ('GB/s' or 'TFLOP/s', a spec's primary_metric)."""
    _check_metric(metric)
    ceil = ceilings(gpu, dtype, calibration)
    if ceil is None:
        return None
    return ceil.bandwidth_gbs if metric == "GB/s" else ceil.peak_tflops


def pct_of_ceiling(value: float, metric: str, ceil: Ceilings | None) -> float | None:
    """`value` (achieved GB/s or TFLOP/s) as a percentage of the matching ceiling; None if unknown."""
    _check_metric(metric)
    if ceil is None:
        return None
    top = ceil.bandwidth_gbs if metric == "GB/s" else ceil.peak_tflops
    return None if not top else 100.0 * value / top


def achieved(metric: str, flops: float, bytes_moved: float, time_us: float) -> float:
    """GB/s or TFLOP/s reached by a run of `time_us` microseconds."""
    _check_metric(metric)
    if time_us <= 0:
        raise ValueError(f"time_us must be > 0, got {time_us}: a zero time is a timing bug")
    return bytes_moved / (time_us * 1e3) if metric == "GB/s" else flops / (time_us * 1e6)


def _check_metric(metric: str) -> None:
    if metric not in METRICS:
        raise ValueError(f"metric {metric!r} is not one of {', '.join(METRICS)} (a KernelSpec.primary_metric)")
