"""Ceilings (for % of peak) and physical floors (to reject impossible timings), per GPU.

Every number comes from autokernel_ci.hardware: the detected GPU's gpu_specs file and the
roofline there. This module only chooses which figures each bound uses:
- the *ceiling* is what the best kernel can reach: hardware.roofline.ceiling (a calibration or the
  spec file's `measured:` copy bandwidth and cuBLAS-class GEMM, else the datasheet);
- the *floor* is a time no kernel can beat: hardware.roofline.floor_us over the *datasheet*
  bandwidth and peak (above every measured figure), so a kernel is rejected only when it claims
  the physically impossible. fp32 takes the faster of the fp32 and tf32 peaks: fp32 GEMMs may run
  on tf32 tensor cores (tf32x3 keeps fp32 accuracy), and a floor must not reject them.

Where no GPU spec applies (CPU, or a GPU without a gpu_specs file) the figures are those of
REFERENCE_GPU, the H200 the project measured (DESIGN.md §9), labelled as such in `source`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from autokernel_ci.hardware import roofline as hw_roofline
from autokernel_ci.hardware.specs import GpuSpec, dtype_key, load_spec
from autokernel_ci.paths import gpu_specs_dir
from autokernel_ci.specs.base import KernelSpec, Shape

REFERENCE_GPU = "h200"  # gpu_specs key used when no spec matches the device


@dataclass(frozen=True)
class Ceiling:
    value: float  # GB/s or TFLOP/s
    metric: str
    source: str


_detected: list[tuple[GpuSpec, str]] = []


def _gpu() -> tuple[GpuSpec, str]:
    """(GpuSpec, label) for the current device, or the reference GPU's; looked up once per process."""
    if not _detected:
        gpu, label = None, ""
        try:
            if torch.cuda.is_available():
                from autokernel_ci.hardware import detect

                gpu = detect()
                label = f"gpu_specs:{gpu.key}" if gpu is not None else ""
        except Exception:  # noqa: BLE001 - an unknown GPU or a broken spec file: the reference GPU applies
            gpu = None
        if gpu is None:
            try:
                gpu = load_spec(REFERENCE_GPU)
            except Exception:  # noqa: BLE001 - a broken $AUTOKERNEL_GPU_SPECS_DIR: the bundled file
                gpu = load_spec(REFERENCE_GPU, dirs=[gpu_specs_dir()])
            label = f"gpu_specs:{REFERENCE_GPU} (reference GPU: no spec matches this device)"
        _detected.append((gpu, label))
    return _detected[0]


def ceiling(spec: KernelSpec, dtype: torch.dtype) -> Ceiling:
    gpu, label = _gpu()
    value = hw_roofline.ceiling(spec.primary_metric, dtype, gpu)
    if not value and spec.primary_metric == "TFLOP/s":  # no such unit on this GPU: the bf16 tensor cores
        value = hw_roofline.ceiling(spec.primary_metric, torch.bfloat16, gpu)
    return Ceiling(float(value or 0.0), spec.primary_metric, label)


def datasheet_ceilings(gpu: GpuSpec, dtype: torch.dtype) -> hw_roofline.Ceilings:
    """The datasheet bandwidth and peak (the floor's figures, never the measured ones)."""
    key = dtype_key(dtype)
    peaks = [gpu.peak(key)] + ([gpu.peak("tf32")] if key == "fp32" else [])
    peak = max((p for p in peaks if p), default=None)
    source = f"datasheet:{gpu.key}"
    return hw_roofline.Ceilings(key, float(gpu.bandwidth_gbs), peak, source, source)


def floor_us(spec: KernelSpec, shape: Shape, dtype: torch.dtype) -> float:
    """The least time any kernel needs for this problem (bytes/bandwidth and flops/peak, larger), from
    the *datasheet* figures of the detected GPU (never the measured ones: a kernel may beat a
    measured copy by a few percent, it cannot beat the datasheet)."""
    gpu, _ = _gpu()
    return hw_roofline.floor_us(spec.flops(shape), spec.bytes_moved(shape, dtype), datasheet_ceilings(gpu, dtype))


def metric_value(spec: KernelSpec, shape: Shape, dtype: torch.dtype, median_us: float) -> float:
    if median_us <= 0:
        return 0.0
    return hw_roofline.achieved(spec.primary_metric, spec.flops(shape), spec.bytes_moved(shape, dtype), median_us)


def below_floor(spec: KernelSpec, shape: Shape, dtype: torch.dtype, median_us: float) -> str | None:
    """A readable rejection when `median_us` beats physics, else None."""
    floor = floor_us(spec, shape, dtype)
    if median_us < floor:
        return (f"measured {median_us:.2f} us but the physical floor for {spec.describe_shape(shape)} "
                f"{str(dtype).removeprefix('torch.')} is {floor:.2f} us (bytes/bandwidth, flops/peak): the timing "
                "missed work (side stream, skipped rows, cached result) - a measurement bug, not a speedup")
    return None
