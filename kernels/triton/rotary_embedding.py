"""Rotary embedding (RoPE, rotate-half), Triton: BLOCK_S positions x HEADS heads per program, both halves at once.

out[..., :D/2] = x1*cos - x2*sin and out[..., D/2:] = x2*cos + x1*sin, in fp32 (fp64 for fp32
inputs), rounded once. A program owns BLOCK_S positions of HEADS (batch, head) rows: it loads the cos/sin tile once and
applies it to HEADS heads, so the tables are read ~(B*H/HEADS) times from L2 instead of once per
head, and x is read once and written once (the bandwidth floor). x may be strided in any
dimension (e.g. [B,S,H,D] viewed as [B,H,S,D]); the output is contiguous.
"""

import torch
import triton
import triton.language as tl

KERNEL_TYPE = "rotary_embedding"
BACKEND = "triton"
CONFIG = {"BLOCK_S": 16, "HEADS": 4, "num_warps": 4, "EVICT_FIRST": True}
SEARCH_SPACE = {
    "BLOCK_S": [1, 2, 4, 8, 16, 32, 64],
    "HEADS": [1, 2, 4, 8, 16],
    "num_warps": [1, 2, 4, 8],
    "EVICT_FIRST": [False, True],
}
# EVICT_FIRST: x's loads (read once) are marked first for L2 eviction; cos and sin, shared by every head, keep the
# default policy. On the H200 (bf16 2x32x4096x128, round `evict`, alternating points): 40.8 / 40.1 us against
# 41.1 / 41.1 us without (1.5%).


@triton.jit
def _rope_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, n_bh, n_heads, seq, half,
                 sx_b, sx_h, sx_s, sx_d, sc_s, sc_d, ss_s, ss_d,
                 BLOCK_S: tl.constexpr, BLOCK_H: tl.constexpr, HEADS: tl.constexpr, ACC: tl.constexpr,
                 EVICTION: tl.constexpr = ""):
    pid_s = tl.program_id(0)
    pid_bh = tl.program_id(1)
    pos = pid_s * BLOCK_S + tl.arange(0, BLOCK_S)
    dims = tl.arange(0, BLOCK_H)
    mask = (pos[:, None] < seq) & (dims[None, :] < half)
    cos = tl.load(cos_ptr + pos[:, None] * sc_s + dims[None, :] * sc_d, mask=mask, other=0.0).to(ACC)
    sin = tl.load(sin_ptr + pos[:, None] * ss_s + dims[None, :] * ss_d, mask=mask, other=0.0).to(ACC)
    x_off = pos[:, None].to(tl.int64) * sx_s + dims[None, :].to(tl.int64) * sx_d
    o_off = pos[:, None].to(tl.int64) * (2 * half) + dims[None, :]
    for i in tl.static_range(HEADS):  # unrolled: the heads' loads are in flight together
        bh = pid_bh * HEADS + i
        if bh < n_bh:
            b = bh // n_heads
            h = bh % n_heads
            x_base = x_ptr + b.to(tl.int64) * sx_b + h.to(tl.int64) * sx_h
            x1 = tl.load(x_base + x_off, mask=mask, other=0.0, eviction_policy=EVICTION).to(ACC)
            x2 = tl.load(x_base + x_off + half * sx_d, mask=mask, other=0.0, eviction_policy=EVICTION).to(ACC)
            o_base = out_ptr + bh.to(tl.int64) * seq * (2 * half)
            tl.store(o_base + o_off, (x1 * cos - x2 * sin).to(out_ptr.dtype.element_ty), mask=mask)
            tl.store(o_base + o_off + half, (x2 * cos + x1 * sin).to(out_ptr.dtype.element_ty), mask=mask)


def _launch(x, cos, sin, out, cfg):
    b, h, s, d = x.shape
    half = d // 2
    heads = min(cfg["HEADS"], b * h)
    block_s = min(cfg["BLOCK_S"], triton.next_power_of_2(s))
    grid = (triton.cdiv(s, block_s), triton.cdiv(b * h, heads))
    _rope_kernel[grid](
        x, cos, sin, out, b * h, h, s, half,
        *x.stride(), *cos.stride(), *sin.stride(),
        BLOCK_S=block_s, BLOCK_H=triton.next_power_of_2(half), HEADS=heads, num_warps=cfg["num_warps"],
        EVICTION="evict_first" if cfg["EVICT_FIRST"] else "",
        # fp32 inputs are rotated in fp64: at |x| ~ 1000 the fp32 products x1*cos and x2*sin carry
        # ~6e-5 rounding each and cancel to outputs near 0 (2e-4 error measured vs fp32's 1e-5
        # tolerance). Low-precision inputs need only fp32 (their own rounding is 4e-3 / 5e-4).
        ACC=tl.float64 if x.dtype == torch.float32 else tl.float32,
    )


def kernel_fn(x, cos, sin):
    if x.dim() != 4 or x.shape[-1] % 2:
        raise ValueError(f"rotary_embedding expects x[B,H,S,D] with even D, got shape {tuple(x.shape)}")
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel():
        _launch(x, cos, sin, out, CONFIG)
    return out
