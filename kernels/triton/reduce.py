"""Sum over the last dimension, Triton: whole row, several rows per program, or a looped row, fp32 accumulation.

Reading x is the whole cost (the output is 1/N of it). "row" loads a whole row and reduces once (PERSISTENT: a
grid of PERSISTENT programs an SM walks the rows);
"multirow" reduces ROWS narrow rows per program; "looped" accumulates LOOP_BLOCK lanes in fp32
across the row and reduces the lanes once at the end (rows wider than MAX_BLOCK always take it).
No atomics: results are bitwise deterministic. "auto" picks by row width.
"""

import functools

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "reduce"
BACKEND = "triton"
CONFIG = {"VARIANT": "auto", "MAX_BLOCK": 16384, "LOOP_BLOCK": 4096, "ROWS": 8, "num_warps": 8, "EVICT_FIRST": True,
          "PERSISTENT": 0}
SEARCH_SPACE = {
    "VARIANT": ["auto", "row", "multirow", "looped"],
    "MAX_BLOCK": [8192, 16384, 32768],
    "LOOP_BLOCK": [1024, 2048, 4096, 8192],
    "ROWS": [2, 4, 8, 16],
    "num_warps": [4, 8, 16],
    "EVICT_FIRST": [False, True],
    "PERSISTENT": [0, 4, 8],
}
# PERSISTENT: 0 launches a program per row (per ROWS rows for "multirow"); k > 0 launches at most k programs an SM,
# each walking whole rows (the "row" kernel's rows) num_programs apart: no program launches after the first wave.
# Off: on an H100 (round read19, bf16 8192 x 8192, alternating) PERSISTENT 8 took 52.8 / 52.7 us, the default 51.3 /
# 51.9.
KNOB_SCOPE = {"PERSISTENT": {"VARIANT": ["auto", "row"]}}  # "multirow" / "looped" launch a program per row(s)
# EVICT_FIRST marks x's lines first in line for L2 eviction: x is read once, so it need not displace anything
# (Inductor's reductions load their streamed input this way). On the H200 (bf16 8192 x 8192, round `reduce2`,
# benchmarks/variants/reduce_evict.json): 37.9-38.5 us against 41.5-42.2 us without, for "row", "looped" and
# "multirow" alike (9% faster; torch.compile's sum 36.5 us, a copy of the same bytes 37.3 us).

# "auto" packs rows narrower than this (a 768-wide bf16 row is 1.5 KB: too little work per program).
_MULTIROW_BELOW = 2048


@triton.jit
def _one_row(x_ptr, y_ptr, row, n_cols, x_stride, BLOCK: tl.constexpr, EVICTION: tl.constexpr):
    """Row `row` (int64: row * x_stride passes 2^31) loaded whole and summed: the body of both "row" kernels."""
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * x_stride + cols, mask=cols < n_cols, other=0.0, eviction_policy=EVICTION).to(tl.float32)
    tl.store(y_ptr + row, tl.sum(x, axis=0).to(y_ptr.dtype.element_ty))


@triton.jit
def _sum_row(x_ptr, y_ptr, n_rows, n_cols, x_stride, BLOCK: tl.constexpr, EVICTION: tl.constexpr = ""):
    _one_row(x_ptr, y_ptr, tl.program_id(0).to(tl.int64), n_cols, x_stride, BLOCK, EVICTION)


@triton.jit
def _sum_rows_persistent(x_ptr, y_ptr, n_rows, n_cols, x_stride, BLOCK: tl.constexpr, EVICTION: tl.constexpr = ""):
    for row in range(tl.program_id(0).to(tl.int64), n_rows, tl.num_programs(0)):
        _one_row(x_ptr, y_ptr, row, n_cols, x_stride, BLOCK, EVICTION)


@triton.jit
def _sum_multirow(x_ptr, y_ptr, n_rows, n_cols, x_stride, ROWS: tl.constexpr, BLOCK: tl.constexpr,
                  EVICTION: tl.constexpr = ""):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * x_stride + cols[None, :], mask=mask, other=0.0,
                eviction_policy=EVICTION).to(tl.float32)
    tl.store(y_ptr + rows, tl.sum(x, axis=1).to(y_ptr.dtype.element_ty), mask=rows < n_rows)


@triton.jit
def _sum_looped(x_ptr, y_ptr, n_rows, n_cols, x_stride, BLOCK: tl.constexpr, EVICTION: tl.constexpr = ""):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x_row = x_ptr + row * x_stride
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + cols
        acc += tl.load(x_row + offs, mask=offs < n_cols, other=0.0, eviction_policy=EVICTION).to(tl.float32)
    tl.store(y_ptr + row, tl.sum(acc, axis=0).to(y_ptr.dtype.element_ty))


# Read once a device: torch.cuda.get_device_properties costs 2.0 us a call on an H100 host, a hit here 0.09 us
# on the development CPU (timeit, h200.md seventeenth and eighteenth sessions); the launch path asks every call.
@functools.cache
def _processors(device):
    """SMs on a GPU; 1 under the CPU interpreter, so that each program there walks several rows too."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


def _launch(x2, y, cfg):
    n_rows, n_cols = x2.shape
    block = triton.next_power_of_2(n_cols)
    variant = cfg["VARIANT"]
    if variant == "auto":
        variant = "multirow" if block < _MULTIROW_BELOW else "row"
    if block > cfg["MAX_BLOCK"]:
        variant = "looped"  # a wider row does not fit in registers: stream it
    args = (x2, y, n_rows, n_cols, x2.stride(0))
    opts = {"num_warps": cfg["num_warps"], "EVICTION": "evict_first" if cfg["EVICT_FIRST"] else ""}
    if variant == "looped":
        _sum_looped[(n_rows,)](*args, BLOCK=min(cfg["LOOP_BLOCK"], block), **opts)
    elif variant == "multirow":
        rows = max(1, min(cfg["ROWS"], cfg["MAX_BLOCK"] // block))
        _sum_multirow[(triton.cdiv(n_rows, rows),)](*args, ROWS=rows, BLOCK=block, **opts)
    elif cfg["PERSISTENT"]:
        programs = min(n_rows, cfg["PERSISTENT"] * _processors(x2.device))
        _sum_rows_persistent[(programs,)](*args, BLOCK=block, **opts)
    else:
        _sum_row[(n_rows,)](*args, BLOCK=block, **opts)


def kernel_fn(x):
    n_cols = x.shape[-1]
    if x.stride(-1) != 1:
        x = x.contiguous()
    x2 = x.reshape(-1, n_cols)  # a view for contiguous and row-strided inputs, a copy otherwise
    y = torch.empty((x2.shape[0],), dtype=x2.dtype, device=x2.device)
    if x2.shape[0]:
        if n_cols:
            _launch(x2, y, CONFIG)
        else:
            y.fill_(0)  # the sum of an empty row
    return y.view(x.shape[:-1])
