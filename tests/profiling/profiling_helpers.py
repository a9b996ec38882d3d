"""Helpers shared by the profiling tests: the example models and the real CLI in a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "examples" / "models"


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The real command line, in a subprocess."""
    return subprocess.run([sys.executable, "-m", "autokernel_ci", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
