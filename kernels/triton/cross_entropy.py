"""Cross entropy over a large vocabulary, Triton: online log-sum-exp reading the logits once, mean in Triton.

loss_row = logsumexp(logits[row]) - logits[row, target], computed in fp32; rows whose target is
ignore_index (-100) contribute nothing and are not counted. "online" streams a row in BLOCK_V
chunks keeping a running max and rescaled sum (one read of the logits, the bandwidth
floor, one exp per element); "row" holds a whole row in registers when V <= MAX_BLOCK. A second one-program kernel
sums the M row losses and valid-row count in a fixed order (deterministic) and divides.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "cross_entropy"
BACKEND = "triton"
# The search agent's pick on the H200 (bf16, 8192 x 32000, `run --example llama`): 150.3 us against
# 165.7 us for the former BLOCK_V=4096 / 8 warps (1.10x, 3.38x eager; docs/benchmarks/h200.md).
CONFIG = {"VARIANT": "online", "BLOCK_V": 8192, "MAX_BLOCK": 32768, "num_warps": 4, "EVICT_FIRST": True}
SEARCH_SPACE = {
    "VARIANT": ["online", "row"],
    "BLOCK_V": [1024, 2048, 4096, 8192],
    "MAX_BLOCK": [16384, 32768, 65536],
    "num_warps": [4, 8, 16],
    "EVICT_FIRST": [False, True],
}
# EVICT_FIRST: the logits' loads are marked first for L2 eviction (each is read once; the target's logit is reread
# once a row, a 32-byte sector). On the H200 (bf16 8192 x 32000, round `evict`, alternating points): 146.6 / 146.6 us
# against 148.9 / 149.1 us without (1.6%).

IGNORE_INDEX = -100
_MEAN_BLOCK = 1024  # rows summed per step of the final mean (M is 8192 for LLaMA: 8 steps)


@triton.jit
def _ce_row_online(logits_ptr, targets_ptr, loss_ptr, valid_ptr, n_cols, row_stride, ignore_index,
                   BLOCK: tl.constexpr, EVICTION: tl.constexpr = ""):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    row_ptr = logits_ptr + row * row_stride
    # Running max m and sum s rescaled to it; the chunk max is a register reduction, so each
    # element costs one exp (two per element, as a per-lane running max needs, would make the
    # SFU the bottleneck: 2 x 262M exp for 8192 x 32000 ~ as long as reading the logits).
    m = float("-inf")
    s = 0.0
    for start in range(0, n_cols, BLOCK):
        offs = start + cols
        x = tl.load(row_ptr + offs, mask=offs < n_cols, other=float("-inf"), eviction_policy=EVICTION).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # an all -inf prefix stays at s=0, not NaN
        s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), axis=0)
        m = m_new
    target = tl.load(targets_ptr + row)
    valid = target != ignore_index
    safe_target = tl.where(valid, target, 0)
    x_t = tl.load(row_ptr + safe_target).to(tl.float32)
    loss = m + tl.log(s) - x_t
    tl.store(loss_ptr + row, tl.where(valid, loss, 0.0))
    tl.store(valid_ptr + row, valid.to(tl.float32))


@triton.jit
def _ce_row_whole(logits_ptr, targets_ptr, loss_ptr, valid_ptr, n_cols, row_stride, ignore_index,
                  BLOCK: tl.constexpr, EVICTION: tl.constexpr = ""):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    row_ptr = logits_ptr + row * row_stride
    x = tl.load(row_ptr + cols, mask=cols < n_cols, other=float("-inf"), eviction_policy=EVICTION).to(tl.float32)
    m = tl.max(x, axis=0)
    s = tl.sum(tl.exp(x - m), axis=0)
    target = tl.load(targets_ptr + row)
    valid = target != ignore_index
    x_t = tl.sum(tl.where(cols == target, x, 0.0), axis=0)  # already in registers: no second load
    loss = m + tl.log(s) - x_t
    tl.store(loss_ptr + row, tl.where(valid, loss, 0.0))
    tl.store(valid_ptr + row, valid.to(tl.float32))


@triton.jit
def _ce_mean(loss_ptr, valid_ptr, out_ptr, n_rows, BLOCK: tl.constexpr):
    offs0 = tl.arange(0, BLOCK)
    total = tl.zeros((BLOCK,), tl.float32)
    count = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_rows, BLOCK):
        offs = start + offs0
        total += tl.load(loss_ptr + offs, mask=offs < n_rows, other=0.0)
        count += tl.load(valid_ptr + offs, mask=offs < n_rows, other=0.0)
    # All rows ignored gives 0/0 = NaN, as torch's mean reduction does.
    tl.store(out_ptr, tl.sum(total, axis=0) / tl.sum(count, axis=0))


def _launch(logits, targets, out, cfg):
    n_rows, n_cols = logits.shape
    losses = torch.empty((n_rows,), dtype=torch.float32, device=logits.device)
    valid = torch.empty((n_rows,), dtype=torch.float32, device=logits.device)
    block = triton.next_power_of_2(n_cols)
    args = (logits, targets, losses, valid, n_cols, logits.stride(0), IGNORE_INDEX)
    evict = "evict_first" if cfg["EVICT_FIRST"] else ""  # the loads' eviction_policy
    if cfg["VARIANT"] == "row" and block <= cfg["MAX_BLOCK"]:
        _ce_row_whole[(n_rows,)](*args, BLOCK=block, num_warps=cfg["num_warps"], EVICTION=evict)
    else:  # "online", or a row too wide for registers
        _ce_row_online[(n_rows,)](*args, BLOCK=min(cfg["BLOCK_V"], block), num_warps=cfg["num_warps"],
                                  EVICTION=evict)
    _ce_mean[(1,)](losses, valid, out, n_rows, BLOCK=min(_MEAN_BLOCK, triton.next_power_of_2(n_rows)), num_warps=4)


def kernel_fn(logits, targets):
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    targets = targets.contiguous()
    out = torch.empty((), dtype=torch.float32, device=logits.device)
    _launch(logits, targets, out, CONFIG)
    return out
