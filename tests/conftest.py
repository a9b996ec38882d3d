"""Test-session settings: run Triton kernels through the interpreter on machines without a GPU,
and keep litellm offline (it otherwise downloads a price map at import)."""

import os
import shutil

if not shutil.which("nvidia-smi") and os.environ.get("AUTOKERNEL_TEST_DEVICE", "cpu") == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
