"""`autokernel-ci gpu [--calibrate] [--json OUT]`: what GPU is this, what are its ceilings.

Exit 0 whenever the report could be made, also with no GPU or an unknown one (the command is
informative); 2 when --calibrate was asked for but cannot run (no GPU) or --json cannot be written.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autokernel_ci.hardware.calibrate import Calibration, CalibrationError, calibrate
from autokernel_ci.hardware.detect import AMBIGUOUS, FORCED, UNKNOWN, Detection, probe
from autokernel_ci.hardware.roofline import Ceilings, ceilings
from autokernel_ci.hardware.specs import PEAK_KEYS, GpuSpec, SpecError

EXIT_OK, EXIT_USAGE = 0, 2
REPORT_VERSION = 1
# dtypes whose roofline the report prints (the ones kernels run in, plus fp32 for reference)
REPORT_DTYPES = ("bf16", "fp16", "fp32")


@dataclass
class GpuReport:
    detection: Detection
    calibration: Calibration | None = None
    calibration_error: str = ""
    ceilings: dict[str, Ceilings] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        spec = self.detection.spec
        return {
            "version": REPORT_VERSION,
            **self.detection.to_dict(),
            "spec": spec.to_dict() if spec else None,
            "calibration": self.calibration.to_dict() if self.calibration else None,
            "calibration_error": self.calibration_error or None,
            "ratios": self.calibration.ratios(spec) if self.calibration else None,
            "ceilings": {k: c.to_dict() for k, c in self.ceilings.items()},
        }


def build_report(detection: Detection, calibration: Calibration | None = None,
                 calibration_error: str = "") -> GpuReport:
    ceils = {}
    for dtype in REPORT_DTYPES:
        c = ceilings(detection.spec, dtype, calibration)
        if c is not None:
            ceils[dtype] = c
    return GpuReport(detection, calibration, calibration_error, ceils)


def _fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    # datasheet figures as printed: 989.5 stays 989.5, 4269.0 shows as 4,269
    text = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"
    return f"{text} {unit}".rstrip()


def _spec_lines(spec: GpuSpec) -> list[str]:
    arch = f"cc {spec.compute_capability}" if spec.compute_capability else spec.gfx_arch
    unit = "SMs" if spec.vendor == "nvidia" else "CUs"
    lines = [
        f"spec:       {spec.key}  ({spec.name}, {spec.architecture}, {arch})",
        f"chip:       {spec.multiprocessors} {unit}, boost {_fmt(spec.boost_clock_mhz, 'MHz')}, "
        f"L2 {_fmt(spec.l2_cache_mb, 'MB')}, shared/SM {_fmt(spec.shared_memory_per_sm_kb, 'KB')}, "
        f"TDP {_fmt(spec.tdp_w, 'W')}",
        f"memory:     {_fmt(spec.memory_gb, 'GB')} {spec.memory_type or ''}, "
        f"{_fmt(spec.memory_bandwidth_gbs, 'GB/s')} (datasheet)",
        "peaks:      " + ", ".join(f"{k} {_fmt(spec.peak_tflops.get(k))}" for k in PEAK_KEYS)
        + "  TFLOP/s dense (int8: TOPS; -: not supported)",
    ]
    if spec.logical_devices > 1:
        n = spec.logical_devices
        lines.append(f"            package figures; torch sees {n} devices per package, each gets 1/{n}")
    if spec.measured:
        m = spec.measured
        lines.append(f"measured:   {m.date}: copy {_fmt(m.copy_gbs, 'GB/s')}, bf16 GEMM "
                     f"{_fmt(m.gemm_bf16_tflops, 'TFLOP/s')}" + (f" ({m.where})" if m.where else ""))
    lines.append(f"source:     {spec.source.title} <{spec.source.url}>")
    return lines


def render(report: GpuReport) -> str:
    """The one text rendering of a GPU report."""
    det = report.detection
    lines = []
    if det.device is None:
        lines.append(f"GPU: none. {det.note}")
    else:
        dev = det.device
        lines.append(f"GPU {dev.index}:      {dev.name}  ({dev.total_memory_gib:.1f} GiB, {dev.multiprocessors} "
                     f"multiprocessors" + (f", L2 {dev.l2_cache_mb:g} MB" if dev.l2_cache_mb else "") + ")")
        if det.spec is not None:
            lines.extend(_spec_lines(det.spec))
            if det.status == FORCED:
                lines.append(f"note:       {det.note}")
        else:
            lines.append(f"{'UNKNOWN' if det.status == UNKNOWN else 'AMBIGUOUS'}: {det.note}")
    if report.calibration is not None:
        cal = report.calibration
        ratios = cal.ratios(det.spec)
        lines.append(
            f"calibrated: copy {_fmt(cal.copy_gbs, 'GB/s')} (p20-p80 {_fmt(cal.copy_gbs_p20)}-{_fmt(cal.copy_gbs_p80)}"
            f", {cal.copy_bytes / 2**30:.1f} GiB moved)"
            + (f" = {100 * ratios['copy']:.0f}% of datasheet" if ratios["copy"] else ""))
        lines.append(
            f"            bf16 GEMM {'x'.join(map(str, cal.gemm_shape))} {_fmt(cal.gemm_tflops, 'TFLOP/s')} "
            f"(p20-p80 {_fmt(cal.gemm_tflops_p20)}-{_fmt(cal.gemm_tflops_p80)})"
            + (f" = {100 * ratios['gemm']:.0f}% of datasheet" if ratios["gemm"] else ""))
        if det.status in (UNKNOWN, AMBIGUOUS):
            lines.append("            put these in a new spec file's `measured:` section (docs/gpu-specs.md)")
    elif report.calibration_error:
        lines.append(f"calibration: not run. {report.calibration_error}")
    if report.ceilings:
        lines.append("roofline ceilings used (bandwidth / peak / ridge):")
        for dtype, c in report.ceilings.items():
            ridge = f"{c.ridge:.0f} FLOP/B" if c.ridge else "-"
            lines.append(f"  {dtype:5} {_fmt(c.bandwidth_gbs, 'GB/s'):>12} [{c.bandwidth_source}]  "
                         f"{_fmt(c.peak_tflops, 'TFLOP/s'):>14} [{c.compute_source}]  ridge {ridge}")
    return "\n".join(lines)


def gpu_main(args: argparse.Namespace) -> int:
    try:
        detection = probe(getattr(args, "device_index", 0) or 0)
    except (SpecError, KeyError, ValueError) as exc:  # a broken spec file, a bad forced key or index
        print(f"autokernel-ci gpu: {exc}", file=sys.stderr)
        return EXIT_USAGE
    calibration, error, code = None, "", EXIT_OK
    if getattr(args, "calibrate", False):
        if detection.device is None:
            error, code = "--calibrate needs a GPU and none is visible here.", EXIT_USAGE
        else:
            try:
                calibration = calibrate(detection.device.index)
            except CalibrationError as exc:
                error, code = str(exc), EXIT_USAGE
    report = build_report(detection, calibration, error)
    print(render(report))
    out = getattr(args, "json", None)
    if out:
        try:
            Path(out).write_text(json.dumps(report.to_dict(), indent=2) + "\n")
        except OSError as exc:
            print(f"autokernel-ci gpu: cannot write --json {out}: {exc.strerror}; pick a writable path",
                  file=sys.stderr)
            return EXIT_USAGE
    return code
