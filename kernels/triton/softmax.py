"""Softmax over the last dimension, Triton: one row per program, several rows per program, or online (looped).

Every variant reads x in its own dtype, computes max, exp and the sum in fp32 and writes y once.
"row" holds a whole row in registers (one read, one write: the bandwidth floor); "multirow" packs
several narrow rows into one program so short rows still issue wide loads; "looped" is the online
softmax (running max and rescaled sum over BLOCK-wide chunks, then a second pass that writes) for
rows wider than MAX_BLOCK, which would not fit in registers. "auto" picks by row width.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "softmax"
BACKEND = "triton"
CONFIG = {"VARIANT": "auto", "MAX_BLOCK": 16384, "LOOP_BLOCK": 8192, "ROWS": 8, "num_warps": 8, "EVICT_FIRST": False,
          "LOOP_WARPS": 16}
SEARCH_SPACE = {
    "VARIANT": ["auto", "row", "multirow", "looped"],
    "MAX_BLOCK": [8192, 16384, 32768],
    "LOOP_BLOCK": [1024, 2048, 4096, 8192],
    "ROWS": [2, 4, 8, 16],
    "num_warps": [4, 8, 16],
    "EVICT_FIRST": [False, True],
    "LOOP_WARPS": [4, 8, 16, 32],
}
# LOOP_BLOCK / LOOP_WARPS: the looped kernel's chunk and warps, apart from num_warps (the row kernels': 32 warps slowed
# them on an H100, bf16 8192 x 8192 94.3 -> 112.7 us, fp16 98304 x 1024 137.9 -> 166.3; round softmax_wide). On an
# H100 (round softmax_looped, fp16 2048 x 50257, eager 204.3 us): 4096 x 8 warps 289.8 us, 8192 x 8 270.1, 8192 x 16
# 251.6-252.1, 8192 x 32 252.0-252.2. Still 0.81x eager: the kernel reads a row twice and takes two exps an element;
# whole 65536-wide rows in registers were slower (430 us at 16 warps, 552 at 32).
# EVICT_FIRST ("row" and "multirow", which read x once): x's loads are marked first for L2 eviction ("looped" reads
# x twice and keeps the default policy so its second pass can hit L2). Off: on the H200 (bf16 8192 x 8192, round
# `evict`, alternating points) it made the softmax 4% slower, 73.3 / 73.3 us against 70.6 / 70.4 us, though it
# made the reduce 10% faster.

# "auto" packs rows narrower than this into one program (a 1024-wide bf16 row is 2 KB: too little
# work per program to hide DRAM latency with one row).
_MULTIROW_BELOW = 2048


@triton.jit
def _softmax_row(x_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride, BLOCK: tl.constexpr,
                 EVICTION: tl.constexpr = ""):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=float("-inf"), eviction_policy=EVICTION).to(tl.float32)
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)
    e = tl.where(mask, e, 0.0)
    y = e / tl.sum(e, axis=0)
    tl.store(y_ptr + row * y_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_multirow(x_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride, ROWS: tl.constexpr, BLOCK: tl.constexpr,
                      EVICTION: tl.constexpr = ""):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * x_stride + cols[None, :], mask=mask, other=float("-inf"),
                eviction_policy=EVICTION).to(tl.float32)
    m = tl.max(x, axis=1)
    # Padding rows are all -inf: subtract 0 there instead of -inf so no NaN is formed (never stored).
    m = tl.where(rows < n_rows, m, 0.0)
    e = tl.exp(x - m[:, None])
    e = tl.where(mask, e, 0.0)
    s = tl.sum(e, axis=1)
    s = tl.where(rows < n_rows, s, 1.0)
    y = e / s[:, None]
    tl.store(y_ptr + rows[:, None] * y_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_looped(x_ptr, y_ptr, n_rows, n_cols, x_stride, y_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x_row = x_ptr + row * x_stride
    # Online softmax: running max m and sum s rescaled to it, one exp per element per pass.
    m = float("-inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        offs = start + cols
        x = tl.load(x_row + offs, mask=offs < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # an all -inf prefix stays at s=0, not NaN
        s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), axis=0)
        m = m_new
    inv = 1.0 / s
    y_row = y_ptr + row * y_stride
    for start in range(0, n_cols, BLOCK):
        offs = start + cols
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=float("-inf")).to(tl.float32)
        tl.store(y_row + offs, (tl.exp(x - m) * inv).to(y_ptr.dtype.element_ty), mask=mask)


def _launch(x2, y2, cfg):
    n_rows, n_cols = x2.shape
    block = triton.next_power_of_2(n_cols)
    variant = cfg["VARIANT"]
    if variant == "auto":
        variant = "multirow" if block < _MULTIROW_BELOW else "row"
    if block > cfg["MAX_BLOCK"]:
        variant = "looped"  # a wider row does not fit in registers: stream it
    args = (x2, y2, n_rows, n_cols, x2.stride(0), y2.stride(0))
    warps = cfg["num_warps"]
    evict = "evict_first" if cfg["EVICT_FIRST"] else ""  # the loads' eviction_policy
    if variant == "looped":
        _softmax_looped[(n_rows,)](*args, BLOCK=min(cfg["LOOP_BLOCK"], block), num_warps=cfg["LOOP_WARPS"])
    elif variant == "multirow":
        rows = max(1, min(cfg["ROWS"], cfg["MAX_BLOCK"] // block))
        _softmax_multirow[(triton.cdiv(n_rows, rows),)](*args, ROWS=rows, BLOCK=block, num_warps=warps,
                          EVICTION=evict)
    else:
        _softmax_row[(n_rows,)](*args, BLOCK=block, num_warps=warps, EVICTION=evict)


def kernel_fn(x):
    n_cols = x.shape[-1]
    if x.stride(-1) != 1:
        x = x.contiguous()
    x2 = x.reshape(-1, n_cols)  # a view for contiguous and row-strided inputs, a copy otherwise
    y = torch.empty(x2.shape, dtype=x2.dtype, device=x2.device)
    if x2.numel():
        _launch(x2, y, CONFIG)
    return y.view(x.shape)

