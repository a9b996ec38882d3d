"""Where the data directories live, for a source checkout and for a non-editable install.

A wheel carries kernels/, gpu_specs/ and templates/ inside the package (autokernel_ci/_data/, see
pyproject.toml); a source checkout or editable install has them at the repository root.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
_DATA_NAMES = ("kernels", "gpu_specs", "templates")


def data_dir(name: str) -> Path:
    """Return the directory `name` (one of kernels, gpu_specs, templates)."""
    if name not in _DATA_NAMES:
        raise ValueError(f"unknown data directory {name!r}: expected one of {', '.join(_DATA_NAMES)}")
    for candidate in (_PACKAGE_DIR / "_data" / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"data directory {name!r} not found next to {_PACKAGE_DIR}: reinstall with `pip install .` "
        "from a full checkout of autokernel-ci"
    )


def kernels_dir() -> Path:
    return data_dir("kernels")


def gpu_specs_dir() -> Path:
    return data_dir("gpu_specs")


def templates_dir() -> Path:
    return data_dir("templates")


def starter_kernel(kernel_type: str, backend: str = "triton") -> Path:
    """Path of the starter kernel file for a kernel type and backend ('triton' or 'cuda')."""
    path = kernels_dir() / backend / f"{kernel_type}.py"
    if not path.is_file():
        raise FileNotFoundError(f"no {backend} starter kernel for {kernel_type!r} at {path}")
    return path
