"""Roofline math: ceilings (calibrated > measured > datasheet), floors, bound by ridge point,
% of ceiling; and a cross-check against the nine kernel specs' FLOP/byte models."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from autokernel_ci.hardware import (
    COMPUTE,
    MEMORY,
    UNKNOWN,
    Calibration,
    achieved,
    bound,
    ceiling,
    ceilings,
    floor_us,
    load_spec,
    pct_of_ceiling,
    roofline_floor_us,
)
from autokernel_ci.specs import SPECS

H200 = load_spec("h200")
A100 = load_spec("a100-sxm4-80gb")


def calib(spec_key: str | None = "h200", copy: float = 4000.0, gemm: float = 700.0) -> Calibration:
    return Calibration(device_name="NVIDIA H200", spec_key=spec_key, copy_gbs=copy, copy_gbs_p20=copy - 10,
                       copy_gbs_p80=copy + 10, copy_bytes=2 << 30, gemm_tflops=gemm, gemm_tflops_p20=gemm - 5,
                       gemm_tflops_p80=gemm + 5, gemm_shape=(8192, 8192, 8192))


def test_measured_beats_datasheet():
    c = ceilings(H200, torch.bfloat16)
    assert (c.bandwidth_gbs, c.peak_tflops) == (4269, 788)
    assert c.bandwidth_source == c.compute_source == "measured:2026-10-28"
    bw, peak = c  # unpacks as (GB/s, TFLOP/s)
    assert (bw, peak) == (4269, 788)


def test_calibration_beats_measured():
    c = ceilings(H200, "bf16", calib())
    assert (c.bandwidth_gbs, c.peak_tflops) == (4000, 700)
    assert c.bandwidth_source == c.compute_source == "calibrated"


def test_datasheet_when_nothing_measured():
    c = ceilings(A100, torch.float16)
    assert (c.bandwidth_gbs, c.peak_tflops) == (2039, 312)
    assert c.compute_source == "datasheet:a100-sxm4-80gb"


@pytest.mark.parametrize("dtype,peak", [(torch.float16, 788), (torch.float32, 67), (torch.float64, 67), ("tf32", 494.5),
                                        ("fp8", 1979)])
def test_bf16_gemm_measurement_only_bounds_the_same_pipe(dtype, peak):
    """The measured bf16 GEMM applies to fp16 (same tensor-core rate), not to fp32/fp8: those keep
    the datasheet. fp64 takes the tensor-core rate (67), not the vector one (34)."""
    assert ceilings(H200, dtype).peak_tflops == peak


def test_calibration_from_another_gpu_is_refused():
    with pytest.raises(ValueError, match="re-run `autokernel-ci gpu --calibrate`"):
        ceilings(A100, "bf16", calib(spec_key="h200"))


def test_unknown_gpu_with_calibration_gets_measured_ceilings_only():
    c = ceilings(None, "bf16", calib(spec_key=None))
    assert (c.bandwidth_gbs, c.peak_tflops) == (4000, 700)
    assert ceilings(None, "fp32", calib(spec_key=None)).peak_tflops is None  # never guessed
    assert ceilings(None, "bf16") is None


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("key", ["h200", "a100-sxm4-80gb", "mi250x", "rtx-4090"])
def test_floor_is_max_of_memory_and_compute_terms(key, dtype):
    c = ceilings(load_spec(key), dtype)
    nbytes, flops = 1e9, 1e12
    mem_us, comp_us = nbytes / c.bandwidth_gbs * 1e6 / 1e9, flops / c.peak_tflops * 1e6 / 1e12
    assert floor_us(flops, nbytes, c) == pytest.approx(max(mem_us, comp_us))
    assert floor_us(0, nbytes, c) == pytest.approx(mem_us)
    assert floor_us(flops, 0, c) == pytest.approx(comp_us)


def test_floor_in_microseconds_on_h200():
    c = ceilings(H200, "bf16")
    assert floor_us(0, 4269e6, c) == pytest.approx(1000.0)  # 4.269 GB at 4269 GB/s = 1 ms
    assert floor_us(788e9, 0, c) == pytest.approx(1000.0)  # 788 GFLOP at 788 TFLOP/s = 1 ms


def test_bound_by_ridge_point():
    c = ceilings(H200, "bf16")
    assert c.ridge == pytest.approx(788e12 / 4269e9)  # ~185 FLOP/byte
    assert bound(c.ridge * 0.9 * 1e6, 1e6, c) == MEMORY
    assert bound(c.ridge * 1.1 * 1e6, 1e6, c) == COMPUTE
    assert bound(0, 1e6, c) == MEMORY
    assert bound(1e6, 0, c) == COMPUTE


def test_missing_dtype_keeps_memory_floor_and_says_unknown():
    """A100 has no fp8: the bytes term is still a true floor; the class is unknown, not invented."""
    floor, kind = roofline_floor_us(1e12, 2039e6, "fp8", A100)
    assert floor == pytest.approx(1000.0) and kind == UNKNOWN
    assert roofline_floor_us(0, 2039e6, "fp8", A100) == (pytest.approx(1000.0), MEMORY)


def test_no_gpu_no_floor():
    assert roofline_floor_us(1e12, 1e9, "bf16", None) == (None, UNKNOWN)
    assert ceiling("GB/s", "bf16", None) is None
    assert pct_of_ceiling(100.0, "GB/s", None) is None


def test_mi250x_ceilings_are_per_gcd():
    c = ceilings(load_spec("mi250x"), "bf16")
    assert c.bandwidth_gbs == pytest.approx(1638.4) and c.peak_tflops == pytest.approx(191.5)
    assert ceilings(load_spec("mi250x"), "fp32").peak_tflops == pytest.approx(95.7 / 2)  # matrix FP32


def test_pct_of_ceiling_and_achieved():
    c = ceilings(H200, "bf16")
    assert pct_of_ceiling(3887.0, "GB/s", c) == pytest.approx(100 * 3887 / 4269)  # softmax starter, DESIGN §9
    assert pct_of_ceiling(394.0, "TFLOP/s", c) == pytest.approx(50.0)
    assert achieved("GB/s", 0, 4269e6, 1000.0) == pytest.approx(4269.0)
    assert achieved("TFLOP/s", 788e9, 0, 1000.0) == pytest.approx(788.0)
    assert ceiling("TFLOP/s", "bf16", H200) == 788 and ceiling("GB/s", "bf16", H200) == 4269


def test_pct_of_ceiling_without_compute_peak():
    c = ceilings(A100, "fp8")
    assert pct_of_ceiling(10.0, "TFLOP/s", c) is None


@pytest.mark.parametrize("bad", ["GB", "tflops", ""])
def test_metric_must_be_a_spec_metric(bad):
    with pytest.raises(ValueError, match="GB/s, TFLOP/s"):
        pct_of_ceiling(1.0, bad, ceilings(H200, "bf16"))


@pytest.mark.parametrize("flops,nbytes", [(-1.0, 1.0), (1.0, -1.0)])
def test_negative_models_are_errors(flops, nbytes):
    with pytest.raises(ValueError, match="must be >= 0"):
        floor_us(flops, nbytes, ceilings(H200, "bf16"))


def test_zero_time_is_a_timing_bug():
    with pytest.raises(ValueError, match="timing bug"):
        achieved("GB/s", 0, 1e9, 0.0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kernel_type", sorted(SPECS))
def test_kernel_specs_classify_as_their_primary_metric(kernel_type, dtype):
    """At the model shape on an H200, a spec whose metric is TFLOP/s must be compute-bound and a
    GB/s one memory-bound: the spec's FLOP/byte models and the roofline agree."""
    spec = SPECS[kernel_type]
    shape = spec.model_shape()
    floor, kind = roofline_floor_us(spec.flops(shape), spec.bytes_moved(shape, dtype), dtype, H200)
    assert kind == (COMPUTE if spec.primary_metric == "TFLOP/s" else MEMORY)
    assert floor > 0


def test_rmsnorm_floor_matches_design_numbers():
    """RMSNorm 8192x4096 bf16 moves ~134 MB: at 4269 GB/s that is ~31.4 us, so DESIGN §9's 3775 GB/s
    starter is 88% of the ceiling."""
    spec = SPECS["rmsnorm"]
    shape = {"M": 8192, "N": 4096}
    nbytes = spec.bytes_moved(shape, torch.bfloat16)
    floor, kind = roofline_floor_us(spec.flops(shape), nbytes, torch.bfloat16, H200)
    assert kind == MEMORY and floor == pytest.approx(nbytes / 4269e3)
    assert pct_of_ceiling(3775.0, "GB/s", ceilings(H200, torch.bfloat16)) == pytest.approx(88.4, abs=0.1)


def test_ceilings_serialise():
    d = ceilings(H200, "bf16").to_dict()
    assert d["bandwidth_gbs"] == 4269 and d["ridge"] == pytest.approx(184.6, abs=0.1)
    assert dataclasses.is_dataclass(ceilings(H200, "bf16"))
