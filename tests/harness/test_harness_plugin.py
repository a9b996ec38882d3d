"""The pytest plugin: plain `pytest --autokernel-kernel=PATH` runs the five stages; it stays cheap
to import; `kernel_benchmark` produces pytest-benchmark JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from harness_testlib import EXPLOITS, FIXTURES


def _pytest(args, cwd):
    # A clean child session: not an xdist worker even when this suite runs under -n.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST", "PYTEST_ADDOPTS"))}
    env["TRITON_INTERPRET"] = "1"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", *args]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_plugin_import_does_not_import_torch():
    code = "import sys, autokernel_ci.harness.plugin, autokernel_ci.harness; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_pytest_runs_five_stages_and_writes_json(tmp_path):
    out = tmp_path / "verdict.json"
    proc = _pytest([f"--autokernel-kernel={FIXTURES / 'softmax_honest.py'}", "--autokernel-dtypes=float32",
                    f"--autokernel-json={out}", "--autokernel-seed=7"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "5 passed" in proc.stdout
    verdict = json.loads(out.read_text())
    assert verdict["status"] == "pass" and [s["status"] for s in verdict["stages"]] == ["pass"] * 5


def test_pytest_rejects_exploit_and_generated_module(tmp_path):
    (tmp_path / "test_verify.py").write_text(
        "import pytest\nfrom autokernel_ci.harness.stage_tests import *  # noqa: F401,F403\n\n\n"
        f"@pytest.fixture(scope='session', params=[{str(EXPLOITS / 'cached_result.py')!r}])\n"
        "def autokernel_kernel(request):\n    return request.param\n")
    out = tmp_path / "verdict.json"
    proc = _pytest(["test_verify.py", "--autokernel-dtypes=float32", f"--autokernel-json={out}"], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "1 failed, 4 skipped" in proc.stdout and "caching" in proc.stdout
    verdict = json.loads(out.read_text())
    assert verdict["status"] == "fail" and verdict["stages"][0]["failures"][0]["check"] == "caching"


def test_kernel_benchmark_json(tmp_path):
    (tmp_path / "test_bench.py").write_text(
        "import importlib.util, torch\n"
        f"spec = importlib.util.spec_from_file_location('k', {str(FIXTURES / 'softmax_honest.py')!r})\n"
        "k = importlib.util.module_from_spec(spec); spec.loader.exec_module(k)\n\n\n"
        "def test_softmax(kernel_benchmark):\n"
        "    x = torch.randn(8, 64)\n"
        "    y = kernel_benchmark(k.kernel_fn, x, rounds=3, bytes_moved=2 * x.numel() * 4)\n"
        "    assert y.shape == x.shape\n")
    out = tmp_path / "bench.json"
    proc = _pytest(["test_bench.py", "--benchmark-only", f"--benchmark-json={out}"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    (bench,) = data["benchmarks"]
    assert bench["name"] == "test_softmax" and bench["stats"]["rounds"] == 3 and bench["stats"]["median"] > 0
    assert bench["extra_info"]["GB/s"] > 0 and "note" in bench["extra_info"]


def test_stage_tests_are_plain_data_in_stage_order():
    from autokernel_ci.harness import stage_tests
    from autokernel_ci.harness.results import STAGES

    assert tuple(stage_tests.STAGE_TESTS) == STAGES
    assert stage_tests.__all__ == [f.__name__ for f in stage_tests.STAGE_TESTS.values()]
    assert all(f.__name__ == f"test_{name}" for name, f in stage_tests.STAGE_TESTS.items())  # the template's names
