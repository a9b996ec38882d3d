"""`autokernel-ci gpu` as a real subprocess, the renderer, and calibrate() on CPU (and GPU, when
there is one: small sizes so the test stays quick)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autokernel_ci.hardware import Calibration, CalibrationError, calibrate, identify, load_spec
from autokernel_ci.hardware.commands import build_report, render
from autokernel_ci.hardware.detect import FORCE_ENV

REPO = Path(__file__).resolve().parents[2]
HAS_GPU = torch.cuda.is_available()


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    full_env.pop(FORCE_ENV, None)
    return subprocess.run([sys.executable, "-m", "autokernel_ci", "gpu", *args], cwd=REPO, env=full_env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU message")
def test_gpu_command_without_gpu_exits_0_with_clear_message(tmp_path):
    out = tmp_path / "gpu.json"
    proc = run_cli("--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "GPU: none" in proc.stdout and "torch.cuda.is_available() is False" in proc.stdout
    data = json.loads(out.read_text())
    assert data["version"] == 1 and data["status"] == "no_gpu" and data["spec"] is None
    assert data["ceilings"] == {}


@pytest.mark.skipif(HAS_GPU, reason="checks the no-GPU message")
def test_gpu_calibrate_without_gpu_says_so_and_exits_2():
    proc = run_cli("--calibrate")
    assert proc.returncode == 2
    assert "--calibrate needs a GPU" in proc.stdout


@pytest.mark.skipif(not HAS_GPU, reason="needs a GPU")
def test_gpu_command_on_gpu_prints_device_and_ceilings(tmp_path):
    out = tmp_path / "gpu.json"
    proc = run_cli("--json", str(out))
    assert proc.returncode == 0, proc.stderr
    assert torch.cuda.get_device_name(0) in proc.stdout
    data = json.loads(out.read_text())
    assert data["device"]["name"] == torch.cuda.get_device_name(0)
    if data["status"] == "matched":
        assert data["ceilings"]["bf16"]["bandwidth_gbs"] > 0


def test_gpu_json_to_unwritable_path_exits_2(tmp_path):
    proc = run_cli("--json", str(tmp_path / "no-such-dir" / "gpu.json"))
    assert proc.returncode == 2 and "cannot write --json" in proc.stderr


class _Props:
    def __init__(self, name: str, mib: int, sms: int, cc: tuple[int, int] = (9, 0)):
        self.name, self.total_memory, self.multi_processor_count = name, mib * 2**20, sms
        self.major, self.minor = cc


def _cal(spec_key: str | None, copy: float, gemm: float) -> Calibration:
    return Calibration(device_name="NVIDIA H200", spec_key=spec_key, copy_gbs=copy, copy_gbs_p20=copy,
                       copy_gbs_p80=copy, copy_bytes=2 << 30, gemm_tflops=gemm, gemm_tflops_p20=gemm,
                       gemm_tflops_p80=gemm, gemm_shape=(8192, 8192, 8192))


def test_render_matched_gpu_with_calibration_shows_ratios():
    det = identify(_Props("NVIDIA H200", 143771, 132))
    report = build_report(det, _cal("h200", 4320.0, 791.5))
    text = render(report)
    assert "h200" in text and "132 SMs" in text and "4,800 GB/s (datasheet)" in text
    assert "= 90% of datasheet" in text  # 4320 / 4800
    assert "= 80% of datasheet" in text  # 791.5 / 989.5
    assert "[calibrated]" in text and "NVIDIA H200 Tensor Core GPU datasheet" in text
    d = report.to_dict()
    assert d["ratios"]["copy"] == pytest.approx(0.9) and d["ceilings"]["bf16"]["compute_source"] == "calibrated"
    assert json.loads(json.dumps(d))["spec"]["key"] == "h200"


def test_render_matched_gpu_uses_measured_section():
    text = render(build_report(identify(_Props("NVIDIA H200", 143771, 132))))
    assert "measured:   2026-10-28: copy 4,269 GB/s, bf16 GEMM 788 TFLOP/s" in text
    assert "[measured:2026-10-28]" in text


def test_render_unknown_gpu_says_what_to_do():
    det = identify(_Props("NVIDIA A10G", 22731, 80, (8, 6)))
    text = render(build_report(det, _cal(None, 540.0, 60.0)))
    assert "UNKNOWN" in text and "gpu_specs/<key>.yaml" in text and "docs/gpu-specs.md" in text
    assert "measured:` section" in text
    assert "of datasheet" not in text  # no datasheet to compare with


def test_render_mi250x_explains_per_gcd_figures():
    det = identify(type("P", (), {"name": "AMD Instinct MI250X", "major": 9, "minor": 0,
                                  "total_memory": 65520 * 2**20, "multi_processor_count": 110,
                                  "gcnArchName": "gfx90a:sramecc+:xnack-"})())
    text = render(build_report(det))
    assert "torch sees 2 devices per package" in text and "220 CUs" in text


@pytest.mark.skipif(HAS_GPU, reason="checks the CPU error")
def test_calibrate_on_cpu_raises_clear_error():
    with pytest.raises(CalibrationError) as info:
        calibrate()
    msg = str(info.value)
    assert "needs a GPU" in msg and "autokernel-ci gpu --calibrate" in msg and "gpu_specs/" in msg


@pytest.mark.skipif(not HAS_GPU, reason="needs a GPU")
def test_calibrate_small_on_gpu():
    cal = calibrate(0, copy_bytes=256 << 20, gemm_size=2048, warmup=2, repeats=5)
    assert cal.copy_bytes == 256 << 20 and cal.gemm_shape == (2048, 2048, 2048)
    assert cal.copy_gbs_p20 <= cal.copy_gbs <= cal.copy_gbs_p80
    assert 0 < cal.gemm_tflops_p20 <= cal.gemm_tflops <= cal.gemm_tflops_p80
    if cal.spec_key:
        spec = load_spec(cal.spec_key)
        # above the datasheet is a measurement bug (DESIGN §9)
        assert cal.copy_gbs < spec.bandwidth_gbs and cal.gemm_tflops < spec.peak("bf16")
    assert Calibration.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal


def test_calibrate_rejects_too_few_repeats():
    if not HAS_GPU:
        pytest.skip("argument checks run after the GPU check")
    with pytest.raises(ValueError, match="repeats must be >= 2"):
        calibrate(0, repeats=1)


def test_render_forced_spec_says_it_was_forced(monkeypatch):
    monkeypatch.setenv(FORCE_ENV, "a10")
    det = identify(_Props("NVIDIA A10G", 22731, 80, (8, 6)))
    text = render(build_report(det))
    assert "spec:       a10" in text and f"forced by ${FORCE_ENV}" in text
