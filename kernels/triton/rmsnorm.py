"""RMSNorm (LLaMA), Triton: whole row in registers, several rows per program, or a looped two-pass row.

y = x * rsqrt(mean(x^2) + eps) * weight, with the mean square accumulated in fp32 and one rounding
to x.dtype at the end. "row" reads x once and writes y once (the bandwidth floor); "multirow"
packs ROWS narrow rows into one program; "looped" streams rows wider than MAX_BLOCK in LOOP_BLOCK
chunks (one pass for the mean square, one to write). "auto" picks by row width.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "rmsnorm"
BACKEND = "triton"
CONFIG = {"VARIANT": "auto", "MAX_BLOCK": 16384, "LOOP_BLOCK": 4096, "ROWS": 4, "num_warps": 8, "EVICT_FIRST": False}
SEARCH_SPACE = {
    "VARIANT": ["auto", "row", "multirow", "looped"],
    "MAX_BLOCK": [8192, 16384, 32768],
    "LOOP_BLOCK": [1024, 2048, 4096, 8192],
    "ROWS": [2, 4, 8, 16],
    "num_warps": [4, 8, 16],
    "EVICT_FIRST": [False, True],
}
# EVICT_FIRST ("row" and "multirow", which read x once): x's loads are marked first for L2 eviction ("looped" reads
# x twice and keeps the default policy so its second pass can hit L2). Off: on the H200 (bf16 8192 x 4096, round
# `evict`, alternating points) 38.6 / 39.0 us against 38.8 / 37.7 us without, no gain.

# "auto" packs rows narrower than this (a 768-wide bf16 row is 1.5 KB: too little work per program).
_MULTIROW_BELOW = 2048


@triton.jit
def _rmsnorm_row(x_ptr, w_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride, eps, BLOCK: tl.constexpr,
                 EVICTION: tl.constexpr = ""):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0, eviction_policy=EVICTION).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(y_ptr + row * y_stride + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rmsnorm_multirow(x_ptr, w_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride, eps,
                      ROWS: tl.constexpr, BLOCK: tl.constexpr, EVICTION: tl.constexpr = ""):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * x_stride + cols[None, :], mask=mask, other=0.0,
                eviction_policy=EVICTION).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / n_cols + eps)
    y = x * rstd[:, None] * w[None, :]
    tl.store(y_ptr + rows[:, None] * y_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rmsnorm_looped(x_ptr, w_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x_row = x_ptr + row * x_stride
    acc = tl.zeros((BLOCK,), tl.float32)  # per-lane partial sums: one tree reduction at the end
    for start in range(0, n_cols, BLOCK):
        offs = start + cols
        x = tl.load(x_row + offs, mask=offs < n_cols, other=0.0).to(tl.float32)
        acc += x * x
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    y_row = y_ptr + row * y_stride
    for start in range(0, n_cols, BLOCK):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + offs, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def _launch(x2, w, y2, eps, cfg):
    n_rows, n_cols = x2.shape
    block = triton.next_power_of_2(n_cols)
    variant = cfg["VARIANT"]
    if variant == "auto":
        variant = "multirow" if block < _MULTIROW_BELOW else "row"
    if block > cfg["MAX_BLOCK"]:
        variant = "looped"  # a wider row does not fit in registers: stream it
    args = (x2, w, y2, n_rows, n_cols, x2.stride(0), y2.stride(0), float(eps))
    warps = cfg["num_warps"]
    evict = "evict_first" if cfg["EVICT_FIRST"] else ""  # the loads' eviction_policy
    if variant == "looped":
        _rmsnorm_looped[(n_rows,)](*args, BLOCK=min(cfg["LOOP_BLOCK"], block), num_warps=warps)
    elif variant == "multirow":
        rows = max(1, min(cfg["ROWS"], cfg["MAX_BLOCK"] // block))
        _rmsnorm_multirow[(triton.cdiv(n_rows, rows),)](*args, ROWS=rows, BLOCK=block, num_warps=warps,
                          EVICTION=evict)
    else:
        _rmsnorm_row[(n_rows,)](*args, BLOCK=block, num_warps=warps, EVICTION=evict)


def kernel_fn(x, weight, eps):
    n_cols = x.shape[-1]
    if x.stride(-1) != 1:
        x = x.contiguous()
    x2 = x.reshape(-1, n_cols)  # a view for contiguous and row-strided inputs, a copy otherwise
    w = weight.contiguous()
    y = torch.empty(x2.shape, dtype=x2.dtype, device=x2.device)
    if x2.numel():
        _launch(x2, w, y, eps, CONFIG)
    return y.view(x.shape)
