"""Measure the two ceilings on the spot: device-to-device copy bandwidth and a large bf16 GEMM.

Datasheet peaks are leads; what a kernel can reach is what the memory system and cuBLAS/hipBLAS
reach here (on this project's H200: copy 4269 GB/s = 89% of the 4.8 TB/s datasheet, bf16 GEMM
788 TFLOP/s = 80% of 989.5). Both are timed with device events and summarised by the median.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from autokernel_ci.hardware.specs import GpuSpec

# Copy buffer: 1 GiB each way (2 GiB of traffic) is 17x the largest L2 here (H200: 60 MB as torch
# reports it) and ~0.5 ms on an H200, long enough that launch overhead (~5 us) is < 1%.
COPY_BYTES = 1 << 30
# 8192^3 is the size measured on this project's H200 (788 TFLOP/s); smaller GEMMs do not fill 132 SMs.
GEMM_SIZE = 8192
GEMM_DTYPE = "bf16"
WARMUP = 3  # first calls pay cuBLAS handle creation and heuristics
REPEATS = 20  # median of 20 event-timed runs; the spread (p20..p80) is reported beside it


class CalibrationError(RuntimeError):
    """Calibration cannot run here; the message says why and where it can."""


@dataclass
class Calibration:
    device_name: str
    spec_key: str | None
    copy_gbs: float  # median, bytes read + written
    copy_gbs_p20: float
    copy_gbs_p80: float
    copy_bytes: int  # bytes moved by one copy (read + written)
    gemm_tflops: float  # median
    gemm_tflops_p20: float
    gemm_tflops_p80: float
    gemm_shape: tuple[int, int, int]
    gemm_dtype: str = GEMM_DTYPE
    repeats: int = REPEATS
    date: str = field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))
    torch_version: str = ""

    def ratios(self, spec: GpuSpec | None) -> dict[str, float | None]:
        """Measured / datasheet for copy bandwidth and bf16 GEMM (None without a spec)."""
        if spec is None:
            return {"copy": None, "gemm": None}
        peak = spec.peak(self.gemm_dtype)
        return {"copy": self.copy_gbs / spec.bandwidth_gbs, "gemm": self.gemm_tflops / peak if peak else None}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Calibration:
        return cls(**{**d, "gemm_shape": tuple(d["gemm_shape"])})


def _percentiles(values: list[float]) -> tuple[float, float, float]:
    """(median, p20, p80) of the samples."""
    qs = statistics.quantiles(values, n=10, method="inclusive")
    return statistics.median(values), qs[1], qs[7]


def _time_ms(torch: Any, fn: Any, warmup: int, repeats: int) -> list[float]:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def _measure_copy(torch: Any, device: Any, copy_bytes: int, warmup: int, repeats: int) -> tuple[int, list[float]]:
    """Bytes moved per copy (read + written) and GB/s per run. uint8, so any size works."""
    n = copy_bytes // 2
    src = torch.empty(n, dtype=torch.uint8, device=device).random_()
    dst = torch.empty_like(src)
    times = _time_ms(torch, lambda: dst.copy_(src), warmup, repeats)
    moved = 2 * n
    return moved, [moved / (ms * 1e-3) / 1e9 for ms in times]


def _measure_gemm(torch: Any, device: Any, size: int, warmup: int,
                  repeats: int) -> tuple[tuple[int, int, int], list[float]]:
    """(M, N, K) and TFLOP/s per run of a bf16 GEMM on random data: zeros run ~13% faster on the
    H200 (894 vs 788 TFLOP/s) and would give a false ceiling."""
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16, generator=gen)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16, generator=gen)
    c = torch.empty(size, size, device=device, dtype=torch.bfloat16)
    times = _time_ms(torch, lambda: torch.mm(a, b, out=c), warmup, repeats)
    return (size, size, size), [2.0 * size**3 / (ms * 1e-3) / 1e12 for ms in times]


def calibrate(device_index: int = 0, *, copy_bytes: int = COPY_BYTES, gemm_size: int = GEMM_SIZE,
              warmup: int = WARMUP, repeats: int = REPEATS) -> Calibration:
    """Measure copy bandwidth and bf16 GEMM throughput on GPU `device_index`."""
    import torch

    if not torch.cuda.is_available():
        raise CalibrationError(
            "calibrate() needs a GPU: torch.cuda.is_available() is False here "
            f"(torch {torch.__version__}). Run `autokernel-ci gpu --calibrate` on the GPU runner; "
            "without it the roofline uses the datasheet (or `measured:`) figures in gpu_specs/.")
    if repeats < 2 or warmup < 0:
        raise ValueError(f"repeats must be >= 2 (got {repeats}) and warmup >= 0 (got {warmup}): a median needs samples")
    from autokernel_ci.hardware.detect import identify

    detection = identify(torch.cuda.get_device_properties(device_index), device_index)
    device = torch.device("cuda", device_index)
    with torch.cuda.device(device):
        moved, copy = _measure_copy(torch, device, copy_bytes, warmup, repeats)
        shape, gemm = _measure_gemm(torch, device, gemm_size, warmup, repeats)
        torch.cuda.empty_cache()

    copy_med, copy_p20, copy_p80 = _percentiles(copy)
    gemm_med, gemm_p20, gemm_p80 = _percentiles(gemm)
    return Calibration(
        device_name=torch.cuda.get_device_name(device_index),
        spec_key=detection.spec.key if detection.spec else None,
        copy_gbs=round(copy_med, 1), copy_gbs_p20=round(copy_p20, 1), copy_gbs_p80=round(copy_p80, 1),
        copy_bytes=moved,
        gemm_tflops=round(gemm_med, 1), gemm_tflops_p20=round(gemm_p20, 1), gemm_tflops_p80=round(gemm_p80, 1),
        gemm_shape=shape, repeats=repeats, torch_version=torch.__version__,
    )
