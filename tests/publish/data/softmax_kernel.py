"""Softmax, Triton: one program per row, max-subtracted, fp32 (test data for the publish tests)."""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"
CONFIG = {"num_warps": 4}
SEARCH_SPACE = {"num_warps": [4, 8, 16]}


@triton.jit
def _softmax_row(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + cols, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    _softmax_row[(x2.shape[0],)](x2, y, x2.shape[1], BLOCK=triton.next_power_of_2(x2.shape[1]),
                                 num_warps=CONFIG["num_warps"])
    return y.view(x.shape)
