"""LayerNorm, Triton: whole row in registers, several rows per program, or a looped row with merged statistics.

Mean and variance are computed in fp32 as two passes over registers (mean, then sum((x-mean)^2)),
never as E[x^2]-E[x]^2, which cancels at mean 1000 / std 1. "row" reads x once and writes y once;
"multirow" packs ROWS narrow rows into one program; "looped" streams rows wider than MAX_BLOCK:
each LOOP_BLOCK chunk's mean and squared deviations are merged into the running ones (Chan et
al.'s parallel variance), then a second pass writes y. "auto" picks by row width.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "layernorm"
BACKEND = "triton"
CONFIG = {"VARIANT": "auto", "MAX_BLOCK": 16384, "LOOP_BLOCK": 4096, "ROWS": 4, "num_warps": 8, "EVICT_FIRST": True}
SEARCH_SPACE = {
    "VARIANT": ["auto", "row", "multirow", "looped"],
    "MAX_BLOCK": [8192, 16384, 32768],
    "LOOP_BLOCK": [1024, 2048, 4096, 8192],
    "ROWS": [2, 4, 8, 16],
    "num_warps": [4, 8, 16],
    "EVICT_FIRST": [False, True],
}
# EVICT_FIRST ("row" and "multirow", which read x once): x's loads are marked first for L2 eviction ("looped" reads
# x twice and keeps the default policy so its second pass can hit L2). On the H200 (bf16 8192 x 4096, round
# `evict`, alternating points): 39.3 / 39.0 us against 39.5 / 40.1 us without (1.5%).

# "auto" packs rows narrower than this (a 768-wide bf16 row is 1.5 KB: too little work per program).
_MULTIROW_BELOW = 2048


@triton.jit
def _layernorm_row(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride, eps, BLOCK: tl.constexpr,
                   EVICTION: tl.constexpr = ""):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    # Shift by the row's first element: x - x0 is exact for values within 2x of x0 (Sterbenz), so
    # the sum stays O(sqrt(N) * std) and the mean keeps its digits at mean 1000 / std 1 (unshifted,
    # the fp32 sum of 256 values ~2.6e5 loses 6e-5 of the mean: 3.4e-5 relative error measured).
    x0 = tl.load(x_ptr + row * x_stride).to(tl.float32)
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0, eviction_policy=EVICTION).to(tl.float32)
    xs = tl.where(mask, x - x0, 0.0)
    d = tl.where(mask, xs - tl.sum(xs, axis=0) / n_cols, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * y_stride + cols, (d * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _layernorm_multirow(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride, eps,
                        ROWS: tl.constexpr, BLOCK: tl.constexpr, EVICTION: tl.constexpr = ""):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x0 = tl.load(x_ptr + rows * x_stride, mask=rows < n_rows, other=0.0).to(tl.float32)  # shift, see row
    x = tl.load(x_ptr + rows[:, None] * x_stride + cols[None, :], mask=mask, other=0.0,
                eviction_policy=EVICTION).to(tl.float32)
    xs = tl.where(mask, x - x0[:, None], 0.0)
    d = tl.where(mask, xs - (tl.sum(xs, axis=1) / n_cols)[:, None], 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(d * d, axis=1) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    y = d * rstd[:, None] * w[None, :] + b[None, :]
    tl.store(y_ptr + rows[:, None] * y_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _layernorm_looped(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x_row = x_ptr + row * x_stride
    x0 = tl.load(x_row).to(tl.float32)  # statistics of x - x0 (exact near x0), see _layernorm_row
    mean = 0.0
    m2 = 0.0
    count = 0.0
    for start in range(0, n_cols, BLOCK):
        offs = start + cols
        mask = offs < n_cols
        x = tl.where(mask, tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32) - x0, 0.0)
        n_b = tl.minimum(n_cols - start, BLOCK).to(tl.float32)
        mean_b = tl.sum(x, axis=0) / n_b
        d = tl.where(mask, x - mean_b, 0.0)
        m2_b = tl.sum(d * d, axis=0)
        total = count + n_b
        delta = mean_b - mean
        mean = mean + delta * (n_b / total)
        m2 = m2 + m2_b + delta * delta * (count * n_b / total)
        count = total
    rstd = 1.0 / tl.sqrt(m2 / n_cols + eps)
    y_row = y_ptr + row * y_stride
    for start in range(0, n_cols, BLOCK):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + offs, ((x - x0 - mean) * rstd * w + b).to(y_ptr.dtype.element_ty), mask=mask)


def _launch(x2, w, b, y2, eps, cfg):
    n_rows, n_cols = x2.shape
    block = triton.next_power_of_2(n_cols)
    variant = cfg["VARIANT"]
    if variant == "auto":
        variant = "multirow" if block < _MULTIROW_BELOW else "row"
    if block > cfg["MAX_BLOCK"]:
        variant = "looped"  # a wider row does not fit in registers: stream it
    args = (x2, w, b, y2, n_rows, n_cols, x2.stride(0), y2.stride(0), float(eps))
    warps = cfg["num_warps"]
    evict = "evict_first" if cfg["EVICT_FIRST"] else ""  # the loads' eviction_policy
    if variant == "looped":
        _layernorm_looped[(n_rows,)](*args, BLOCK=min(cfg["LOOP_BLOCK"], block), num_warps=warps)
    elif variant == "multirow":
        rows = max(1, min(cfg["ROWS"], cfg["MAX_BLOCK"] // block))
        _layernorm_multirow[(triton.cdiv(n_rows, rows),)](*args, ROWS=rows, BLOCK=block, num_warps=warps,
                            EVICTION=evict)
    else:
        _layernorm_row[(n_rows,)](*args, BLOCK=block, num_warps=warps, EVICTION=evict)


def kernel_fn(x, weight, bias, eps):
    n_cols = x.shape[-1]
    if x.stride(-1) != 1:
        x = x.contiguous()
    x2 = x.reshape(-1, n_cols)  # a view for contiguous and row-strided inputs, a copy otherwise
    y = torch.empty(x2.shape, dtype=x2.dtype, device=x2.device)
    if x2.numel():
        _launch(x2, weight.contiguous(), bias.contiguous(), y, eps, CONFIG)
    return y.view(x.shape)
