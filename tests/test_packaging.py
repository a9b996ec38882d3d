"""A non-editable install must carry kernels/, gpu_specs/ and templates/ (DESIGN.md §3) and the CUDA prelude."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # --no-build-isolation: hatchling is a dev dependency here; CI's pip has it installed.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out), str(ROOT)], check=True, cwd=out)
    (whl,) = out.glob("autokernel_ci-*.whl")
    return whl


def test_wheel_carries_data_dirs_and_entry_points(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for data in ("kernels", "gpu_specs", "templates"):
        assert any(n.startswith(f"autokernel_ci/_data/{data}/") for n in names), data
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry).decode()
    assert "autokernel-ci = autokernel_ci.cli:main" in text
    assert "autokernel_ci = autokernel_ci.harness.plugin" in text


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """The wheel installed into a directory of its own (one install for the tests that import from it)."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True)
    return target


def _run_installed(target: Path, code: str, cwd: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(target)}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          check=True).stdout


def test_installed_copy_finds_data_from_another_directory(installed, tmp_path):
    code = ("import autokernel_ci.paths as p; print(p.kernels_dir()); print(p.gpu_specs_dir()); "
            "print(p.templates_dir())")
    out = _run_installed(installed, code, tmp_path).split()
    assert all(line.startswith(str(installed)) for line in out), out
    assert all(Path(line).is_dir() for line in out)


def test_installed_copy_reads_the_cuda_prelude_it_carries(wheel, installed, tmp_path):
    # nvrtc.PRELUDE is read from prelude.cuh beside the module: a wheel without that file breaks every CUDA kernel.
    assert "autokernel_ci/prelude.cuh" in zipfile.ZipFile(wheel).namelist()
    code = "import autokernel_ci.nvrtc as n, sys; print(n.__file__); sys.stdout.write(n.PRELUDE)"
    where, text = _run_installed(installed, code, tmp_path).split("\n", 1)
    assert where.startswith(str(installed)), where
    assert text == (ROOT / "autokernel_ci" / "prelude.cuh").read_text(encoding="utf-8")
    assert text.startswith("// ---- autokernel_ci.nvrtc.PRELUDE") and text.endswith("#line 1\n")
