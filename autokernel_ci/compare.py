"""Compare a candidate's output with the high-precision reference under a spec tolerance."""

from __future__ import annotations

import torch

from autokernel_ci.harness.results import CheckFailure
from autokernel_ci.specs.base import Tolerance


def compare(out: object, ref: torch.Tensor, tol: Tolerance, *, expect_dtype: torch.dtype | None = None,
            check: str = "allclose") -> CheckFailure | None:
    """None when `out` matches `ref`; otherwise what failed, with errors and the first bad index.

    Both tests of `Tolerance` apply; NaN/Inf in the output always fails (the reference is finite
    where the output must be).
    """
    if not isinstance(out, torch.Tensor):
        return CheckFailure(check="output_type", message=f"kernel returned {type(out).__name__}, expected a tensor")
    if tuple(out.shape) != tuple(ref.shape):
        return CheckFailure(check="output_shape",
                            message=f"output shape {tuple(out.shape)} != expected {tuple(ref.shape)}")
    if expect_dtype is not None and out.dtype != expect_dtype:
        return CheckFailure(check="output_dtype", message=f"output dtype {out.dtype} != expected {expect_dtype}")
    got = out.detach().to(ref.device, torch.float64)
    want = ref.detach().to(torch.float64)
    finite_ref = torch.isfinite(want)
    bad_nonfinite = ~torch.isfinite(got) & finite_ref
    if bad_nonfinite.any():
        idx = [int(i) for i in bad_nonfinite.nonzero()[0]] if got.dim() else []
        return CheckFailure(check="nan_inf", message=f"output has {int(bad_nonfinite.sum())} NaN/Inf values "
                            f"where the reference is finite", first_bad_index=idx)
    err = (got - want).abs().where(finite_ref, torch.zeros_like(got))
    limit = tol.atol + tol.rtol * want.abs()
    over = (err > limit) & finite_ref
    max_abs = float(err.max()) if err.numel() else 0.0
    max_rel = float((err / want.abs().clamp_min(1e-30)).max()) if err.numel() else 0.0
    ref_norm = float(want.where(finite_ref, torch.zeros_like(want)).norm())
    rel_l2 = float(err.norm()) / ref_norm if ref_norm > 0 else float(err.norm())
    if over.any():
        idx = [int(i) for i in over.nonzero()[0]] if got.dim() else []
        return CheckFailure(check=check, message=f"{int(over.sum())} of {over.numel()} elements beyond "
                            f"atol={tol.atol:g} + rtol={tol.rtol:g}*|ref|", max_abs_err=max_abs,
                            max_rel_err=max_rel, rel_l2=rel_l2, first_bad_index=idx)
    if rel_l2 > tol.rel_l2:
        return CheckFailure(check=check, message=f"relative L2 error {rel_l2:.3g} > {tol.rel_l2:g}: less precise "
                            "than the dtype allows (reduced-precision arithmetic?)", max_abs_err=max_abs,
                            max_rel_err=max_rel, rel_l2=rel_l2)
    return None
