"""REFERENCE STAND-INS, for tests only: each spec's PyTorch reference wrapped as a kernel file.

They let the plug-back be tested for every type independent of the starter kernels (whose own
tests live in tests/kernels); the tests that run the real starters say so in their names.
"""

from __future__ import annotations

from pathlib import Path

from autokernel_ci.specs import KERNEL_TYPES, get_spec

TEMPLATE = '''"""REFERENCE STAND-IN (tests only): the {t} spec's PyTorch reference wrapped as a kernel file."""
from autokernel_ci.specs import get_spec

KERNEL_TYPE = "{t}"
BACKEND = "triton"
CONFIG = {{}}
SEARCH_SPACE = {{}}
_REFERENCE = get_spec(KERNEL_TYPE).reference


def kernel_fn({args}):
    out = _REFERENCE({args})
    return out.to({dtype_arg}) if out.dtype != {dtype_arg} else out
'''


def write_standins(directory: Path, types: tuple[str, ...] = KERNEL_TYPES) -> dict[str, Path]:
    """{kernel_type: path} of stand-in kernel files written into `directory`."""
    paths = {}
    for t in types:
        spec = get_spec(t)
        args = ", ".join(spec.arg_names)
        dtype_arg = "torch.float32" if t == "cross_entropy" else f"{spec.arg_names[0]}.dtype"
        src = TEMPLATE.format(t=t, args=args, dtype_arg=dtype_arg)
        if t == "cross_entropy":  # its dtype argument names torch
            src = src.replace("from autokernel_ci", "import torch\n\nfrom autokernel_ci", 1)
        p = directory / f"standin_{t}.py"
        p.write_text(src)
        paths[t] = p
    return paths
