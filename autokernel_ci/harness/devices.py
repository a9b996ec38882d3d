"""Which device a command runs on when none is named (no torch import unless needed)."""

from __future__ import annotations

import os
import shutil


def default_device() -> str:
    """cuda when a GPU is visible, else cpu. Checked without initialising CUDA in this process."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return "cpu"
    if shutil.which("nvidia-smi") is None and not os.path.exists("/dev/nvidiactl"):
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
