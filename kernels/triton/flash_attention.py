"""Flash attention forward (FA2), Triton: online softmax over K/V blocks, causal block skipping, grouped-query heads.

One program owns BLOCK_M query rows of one (batch, head): it keeps q in registers, streams K and V
in BLOCK_N-row blocks, and carries the running row max m, row sum l and the unnormalised output in
fp32 (scores in base 2: exp2(s * sm_scale * log2 e) is one MUFU op). The S x S score matrix never
reaches memory. Causal: key blocks wholly right of the diagonal are never visited (half the
FLOPs); blocks wholly left of it run without masks and only the diagonal and ragged end blocks
are masked. K/V head = head // (H / Hkv) (GQA). Any S (1, 333, ...) and D in 16..128 (D=96 is
padded to a 128-wide tile and masked); any strides.

VARIANT "tma" reads q/k/v and writes o through tensor descriptors (Hopper's bulk tensor copies: one
instruction per tile, rows past S or D zero-filled by the copy engine): over [B*H*S, D] rows when
the tensors are contiguous and S is a multiple of both blocks, else over the 4-d [B, H, S, D] view.
It needs 16-bit inputs, a contiguous last dimension and 16-byte aligned rows; otherwise the pointer
variant runs. Default "tma", 128-row query blocks, 128 key rows when D pads to 128 (64 below), heavy causal blocks
first, the softmax scale folded into exp2's FMA; on the H200 at 2x32x4096x128 bf16 (benchmarks/variants_gpu.py,
round `flash3`): 566 us causal (486 TFLOP/s), 984 us not causal, 583 us GQA 32/8, against 681 / 1,232 / 698 us
for "pointer" 128x64: 0.89-0.93x SDPA, up from 0.72-0.77x.
"""

import math

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

KERNEL_TYPE = "flash_attention"
BACKEND = "triton"
CONFIG = {"VARIANT": "tma", "BLOCK_M": 128, "BLOCK_N": 0, "num_stages": 3, "num_warps": 8,
          "FP32_DOT": "tf32x3", "REVERSE": True, "MAXNREG": 0}
SEARCH_SPACE = {
    "VARIANT": ["pointer", "tma"],
    "REVERSE": [False, True],
    "BLOCK_M": [32, 64, 128],
    "BLOCK_N": [0, 16, 32, 64, 128],
    "num_stages": [1, 2, 3, 4],
    "num_warps": [4, 8],
    "FP32_DOT": ["tf32x3", "ieee"],
    "MAXNREG": [0, 128],
}

# MAXNREG caps registers a thread (0: the compiler's choice). 128x64 blocks at 2 stages use 96 KB of shared
# memory but 146 registers, so one 8-warp block an SM; capped at 128 (sm_90 compile: no spill) two blocks
# fit, so that one block's softmax could overlap the other's MMAs. Measured on the H200 it is 5-8% slower
# than the default at 2x32x4096x128 (609 / 1,061 / 593 us): a knob for other shapes and GPUs, off by default.
# REVERSE launches the last query blocks first: under a causal mask they visit the most key blocks
# (block i visits i + 1), so starting with them leaves the short ones to fill the final wave.
# FP32_DOT is the tl.dot precision for fp32 inputs only. Plain tf32 is not offered: on the spec's
# peaked_scores case (q, k std 5) tf32's 10-bit input rounding fails 158 of 16384 outputs, up to
# 0.023 off, against fp32's atol 5e-3 (emulated on CPU, S=64, D=128); tf32x3 (three tf32 MMAs)
# keeps fp32 accuracy.
# Shared memory a block may use when the device does not report it: 227 KB on H100/H200.
_DEFAULT_SMEM_BYTES = 232448


@triton.jit
def _online_softmax_step(acc, m_i, l_i, q, k, v, cols, offs_m, S, qk_scale, MASKED: tl.constexpr,
                         CAUSAL: tl.constexpr, PRECISION: tl.constexpr, NEG_SCALE: tl.constexpr):
    """Fold one key block (k, v: [BLOCK_N, BLOCK_D]) into the running max m_i, sum l_i and output acc."""
    qk = tl.dot(q, tl.trans(k), input_precision=PRECISION)
    if MASKED:
        # Diagonal and ragged blocks (a few per row): scale first, then mask, so a zero scale cannot form
        # -inf * 0 = NaN.
        keep = cols[None, :] < S
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        s = tl.where(keep, qk * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.math.exp2(s - m_new[:, None])
    else:
        # Unmasked blocks (the bulk): the scale goes inside exp2's argument as one FMA (qk * scale - m)
        # instead of a multiply and a subtract per score (sm_90 SASS of the 128x128 causal kernel: 4,471
        # lines unfolded, 4,359 with this loop folded). The row max of qk * scale is max(qk) * scale for a
        # positive scale, min(qk) * scale for a negative one.
        if NEG_SCALE:
            m_new = tl.maximum(m_i, tl.min(qk, axis=1) * qk_scale)
        else:
            m_new = tl.maximum(m_i, tl.max(qk, axis=1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])
    # Every row has a finite max here: key 0 is visible to every query row and is always in the
    # first block visited, so m_i - m_new never forms -inf - -inf.
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)
    return acc, m_new, l_i


@triton.jit
def _attend_block(acc, m_i, l_i, q, k_ptrs, v_ptrs, start_n, offs_m, offs_n, d_mask, S, s_ks, s_vs, qk_scale,
                  MASKED: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
                  NEG_SCALE: tl.constexpr):
    cols = start_n + offs_n
    if MASKED:
        k = tl.load(k_ptrs + cols[:, None].to(tl.int64) * s_ks, mask=(cols[:, None] < S) & d_mask[None, :], other=0.0)
        v = tl.load(v_ptrs + cols[:, None].to(tl.int64) * s_vs, mask=(cols[:, None] < S) & d_mask[None, :], other=0.0)
    else:
        k = tl.load(k_ptrs + cols[:, None].to(tl.int64) * s_ks, mask=d_mask[None, :], other=0.0)
        v = tl.load(v_ptrs + cols[:, None].to(tl.int64) * s_vs, mask=d_mask[None, :], other=0.0)
    if UPCAST:  # Triton 3.6's CPU interpreter multiplies bf16 tiles as raw integers
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    return _online_softmax_step(acc, m_i, l_i, q, k, v, cols, offs_m, S, qk_scale, MASKED, CAUSAL, PRECISION,
                                NEG_SCALE)


@triton.jit
def _key_range(start_m, S, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """(end of the unmasked key blocks, end of all key blocks) for query block start_m."""
    if CAUSAL:
        # Key blocks wholly left of this query block's first row need no mask; the diagonal
        # block(s) do; key blocks right of the last row are skipped.
        lo_masked = (start_m * BLOCK_M) // BLOCK_N * BLOCK_N
        hi = tl.minimum((start_m + 1) * BLOCK_M, S)
    else:
        lo_masked = S // BLOCK_N * BLOCK_N
        hi = S
    return lo_masked, hi


@triton.jit
def _attn_fwd(q_ptr, k_ptr, v_ptr, o_ptr, qk_scale, S, H, GROUP,
              s_qb, s_qh, s_qs, s_qd, s_kb, s_kh, s_ks, s_kd, s_vb, s_vh, s_vs, s_vd, s_ob, s_oh, s_os, s_od,
              HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              CAUSAL: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr, REVERSE: tl.constexpr,
              NEG_SCALE: tl.constexpr):
    start_m = tl.program_id(0)
    if REVERSE:
        start_m = tl.num_programs(0) - 1 - start_m
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = bh % H
    hk = (h // GROUP).to(tl.int64)
    h = h.to(tl.int64)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    row_mask = offs_m < S
    q_ptrs = q_ptr + b * s_qb + h * s_qh + offs_m[:, None].to(tl.int64) * s_qs + offs_d[None, :] * s_qd
    q = tl.load(q_ptrs, mask=row_mask[:, None] & d_mask[None, :], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    k_ptrs = k_ptr + b * s_kb + hk * s_kh + offs_d[None, :] * s_kd
    v_ptrs = v_ptr + b * s_vb + hk * s_vh + offs_d[None, :] * s_vd

    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    lo_masked, hi = _key_range(start_m, S, BLOCK_M, BLOCK_N, CAUSAL)
    for start_n in range(0, lo_masked, BLOCK_N):
        acc, m_i, l_i = _attend_block(acc, m_i, l_i, q, k_ptrs, v_ptrs, start_n, offs_m, offs_n, d_mask, S,
                                      s_ks, s_vs, qk_scale, False, CAUSAL, UPCAST, PRECISION, NEG_SCALE)
    for start_n in range(lo_masked, hi, BLOCK_N):
        acc, m_i, l_i = _attend_block(acc, m_i, l_i, q, k_ptrs, v_ptrs, start_n, offs_m, offs_n, d_mask, S,
                                      s_ks, s_vs, qk_scale, True, CAUSAL, UPCAST, PRECISION, NEG_SCALE)
    out = acc / l_i[:, None]
    o_ptrs = o_ptr + b * s_ob + h * s_oh + offs_m[:, None].to(tl.int64) * s_os + offs_d[None, :] * s_od
    tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=row_mask[:, None] & d_mask[None, :])


@triton.jit
def _tma_tile(desc, b, h, row, flat_row0, ROWS: tl.constexpr, BLOCK_D: tl.constexpr, FLAT: tl.constexpr):
    """[ROWS, BLOCK_D] rows row.. of head (b, h): from flat [B*H*S, D] rows at flat_row0 + row, or the 4-d view."""
    # Both branches assign and one return follows: Triton compiles the code after an early return
    # even when a constexpr condition took it.
    if FLAT:
        tile = desc.load([flat_row0 + row, 0])
    else:
        tile = desc.load([b, h, row, 0]).reshape(ROWS, BLOCK_D)
    return tile


@triton.jit
def _tma_step(acc, m_i, l_i, q, k_desc, v_desc, b, hk, start_n, kv_row0, offs_n, offs_m, S, qk_scale,
              BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
              UPCAST: tl.constexpr, FLAT: tl.constexpr, NEG_SCALE: tl.constexpr):
    k = _tma_tile(k_desc, b, hk, start_n, kv_row0, BLOCK_N, BLOCK_D, FLAT)
    v = _tma_tile(v_desc, b, hk, start_n, kv_row0, BLOCK_N, BLOCK_D, FLAT)
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    return _online_softmax_step(acc, m_i, l_i, q, k, v, start_n + offs_n, offs_m, S, qk_scale, MASKED, CAUSAL,
                                "tf32", NEG_SCALE)


@triton.jit
def _attn_fwd_tma(q_desc, k_desc, v_desc, o_desc, qk_scale, S, H, HKV, GROUP,
                  BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
                  UPCAST: tl.constexpr, REVERSE: tl.constexpr, FLAT: tl.constexpr, NEG_SCALE: tl.constexpr):
    start_m = tl.program_id(0)
    if REVERSE:
        start_m = tl.num_programs(0) - 1 - start_m
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    hk = h // GROUP
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    # FLAT: row index into [B*H*S, D] (q, o) and [B*Hkv*S, D] (k, v); int32 holds 2^31 rows.
    q_row0 = bh * S if FLAT else 0
    kv_row0 = (b * HKV + hk) * S if FLAT else 0
    q = _tma_tile(q_desc, b, h, start_m * BLOCK_M, q_row0, BLOCK_M, BLOCK_D, FLAT)
    if UPCAST:
        q = q.to(tl.float32)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    lo_masked, hi = _key_range(start_m, S, BLOCK_M, BLOCK_N, CAUSAL)
    for start_n in range(0, lo_masked, BLOCK_N):
        acc, m_i, l_i = _tma_step(acc, m_i, l_i, q, k_desc, v_desc, b, hk, start_n, kv_row0, offs_n, offs_m, S,
                                  qk_scale, BLOCK_N, BLOCK_D, False, CAUSAL, UPCAST, FLAT, NEG_SCALE)
    for start_n in range(lo_masked, hi, BLOCK_N):
        acc, m_i, l_i = _tma_step(acc, m_i, l_i, q, k_desc, v_desc, b, hk, start_n, kv_row0, offs_n, offs_m, S,
                                  qk_scale, BLOCK_N, BLOCK_D, True, CAUSAL, UPCAST, FLAT, NEG_SCALE)
    out = (acc / l_i[:, None]).to(o_desc.dtype)
    if FLAT:
        o_desc.store([q_row0 + start_m * BLOCK_M, 0], out)
    else:
        o_desc.store([b, h, start_m * BLOCK_M, 0], out.reshape(1, 1, BLOCK_M, BLOCK_D))


def _auto_block_n(block_d):
    """BLOCK_N 0 ("auto"): 128 key rows when the head dim pads to 128 (D 65..128), 64 below. H200, tma, 128-row
    query blocks: 2x32x4096x128 bf16 566 / 984 / 583 us (causal / not / GQA) at 128 against 587 / 1,083 / 625 us
    at 64 with 4 stages (rounds `flash3`, `flash2`);
    8x12x1024x64 fp16 64.6 / 71.5 us at 64 against 99.3 / 112.1 us at 128 (round `hopper`)."""
    return 128 if block_d >= 128 else 64


def _smem_bytes(device):
    if device.type != "cuda":
        return _DEFAULT_SMEM_BYTES
    return getattr(torch.cuda.get_device_properties(device), "shared_memory_per_block_optin", _DEFAULT_SMEM_BYTES)


def _tma_ok(t):
    """A tensor descriptor needs a contiguous last dim and 16-byte aligned base and strides."""
    return (t.stride(-1) == 1 and t.data_ptr() % 16 == 0
            and all((st * t.element_size()) % 16 == 0 for st in t.stride()[:-1]))


def _descriptor(t, rows, block_d, flat):
    if flat:  # [B*H*S, D]: one 2-d tile per block, no reshape in the kernel
        return TensorDescriptor.from_tensor(t.view(-1, t.shape[-1]), [rows, block_d])
    return TensorDescriptor.from_tensor(t, [1, 1, rows, block_d])


def _launch(q, k, v, o, causal, sm_scale, cfg):
    B, H, S, D = q.shape
    block_d = max(16, triton.next_power_of_2(D))  # tl.dot needs >= 16 per dimension
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"] or _auto_block_n(block_d)
    # A pipeline stage holds one K and one V block next to the resident q tile (fp32/tf32x3 keeps
    # q twice: sm_90 compiles measured 128x64, D=128: bf16 32 KB + 3 x 32 KB, fp32 2 x 64 KB + 64 KB
    # per stage). Never ask for more stages than fit; BLOCK_N is halved if even one does not.
    elem = q.element_size()
    q_bytes = bm * block_d * elem * (2 if q.dtype == torch.float32 else 1)
    room = _smem_bytes(q.device) - q_bytes
    while 2 * bn * block_d * elem > room and bn > 16:
        bn //= 2
    per_stage = 2 * bn * block_d * elem
    stages = max(1, min(cfg["num_stages"], room // per_stage))
    grid = (triton.cdiv(S, bm), B * H)
    # Only bf16 is upcast (the interpreter's bf16 dot is wrong); fp16 stays fp16 as on the GPU, so
    # P is rounded to the input dtype before P @ V on the CPU too.
    upcast = q.device.type == "cpu" and q.dtype == torch.bfloat16
    flags = {"NEG_SCALE": float(sm_scale) < 0}
    if cfg["MAXNREG"]:
        flags["maxnreg"] = cfg["MAXNREG"]
    if cfg["VARIANT"] == "tma" and elem == 2 and all(_tma_ok(t) for t in (q, k, v, o)):
        # Flat 2-d rows need every tile inside one head: S a multiple of both blocks, heads packed.
        flat = S % bm == 0 and S % bn == 0 and all(t.is_contiguous() for t in (q, k, v, o))
        descs = [_descriptor(t, rows, block_d, flat) for t, rows in ((q, bm), (k, bn), (v, bn), (o, bm))]
        _attn_fwd_tma[grid](
            *descs, float(sm_scale) * math.log2(math.e), S, H, k.shape[1], H // k.shape[1],
            BLOCK_D=block_d, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=bool(causal), REVERSE=bool(cfg["REVERSE"]),
            UPCAST=upcast, FLAT=flat, num_stages=stages, num_warps=cfg["num_warps"], **flags,
        )
        return
    _attn_fwd[grid](
        q, k, v, o, float(sm_scale) * math.log2(math.e), S, H, H // k.shape[1],
        *q.stride(), *k.stride(), *v.stride(), *o.stride(),
        HEAD_DIM=D, BLOCK_D=block_d, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=bool(causal), REVERSE=bool(cfg["REVERSE"]),
        UPCAST=upcast,
        PRECISION=cfg["FP32_DOT"] if q.dtype == torch.float32 else "tf32",  # tf32: the default
        num_stages=stages, num_warps=cfg["num_warps"], **flags,
    )


def kernel_fn(q, k, v, causal, sm_scale):
    B, H, S, D = q.shape
    hkv = k.shape[1]
    if k.shape != (B, hkv, S, D) or v.shape != k.shape or hkv == 0 or H % hkv:
        raise ValueError(f"flash_attention expects q[B,H,S,D], k/v[B,Hkv,S,D] with Hkv dividing H, got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if o.numel():
        _launch(q, k, v, o, causal, sm_scale, CONFIG)
    return o
