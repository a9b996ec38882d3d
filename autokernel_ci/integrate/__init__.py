"""Plug optimised kernels back into the model: custom ops, patching, the end-to-end check."""

from autokernel_ci.integrate.custom_ops import KernelOp, RegistrationError, register_kernels
from autokernel_ci.integrate.end_to_end import EndToEndResult, end_to_end, render_end_to_end, run_end_to_end
from autokernel_ci.integrate.patching import PatchReport, patch_model

__all__ = ["EndToEndResult", "KernelOp", "PatchReport", "RegistrationError", "end_to_end", "patch_model",
           "register_kernels", "render_end_to_end", "run_end_to_end"]
