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
variant runs. VARIANT "gluon_ws" (the default) is FA3's structure written in Gluon, Triton's lower-level
language, for sm_90: a load warp fills a 3-stage K/V ring through TMA while two consumer warpgroups of 64
query rows each run asynchronous wgmma, block j's softmax overlapping block j-1's P V product; where it
cannot run (another GPU, D <= 64, S not a multiple of the blocks, strided tensors, fewer than 2 stages) the
"tma" kernel does, and the pointer kernel where TMA cannot (fp32, unaligned rows). On the H200 at
2x32x4096x128 bf16 (benchmarks/variants_gpu.py): 512-514 us causal (537 TFLOP/s), 869-913 us not causal,
506-509 us GQA 32/8, 0.99-1.04x SDPA (rounds `gluon_ws`, `gluon_ws2`); as the tile loop it is now (round
`gluon_ws3`) 522-528 / 905-909 / 513-521 us, 0.99-1.01x SDPA in that round; the tma kernel 550-576 /
995-1,015 / 575-591 us (0.85-0.96x), "pointer" 128x64 681 / 1,232 / 698 us.
"""

import functools
import math

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonTensorDescriptor
from triton.tools.tensor_descriptor import TensorDescriptor

KERNEL_TYPE = "flash_attention"
BACKEND = "triton"
CONFIG = {"VARIANT": "gluon_ws", "BLOCK_M": 128, "BLOCK_N": 0, "num_stages": 3, "num_warps": 8,
          "FP32_DOT": "tf32x3", "REVERSE": True, "MAXNREG": 0, "PINGPONG": False, "PERSISTENT": False}
SEARCH_SPACE = {
    "VARIANT": ["pointer", "tma", "gluon_ws"],
    "REVERSE": [False, True],
    "BLOCK_M": [32, 64, 128],
    "BLOCK_N": [0, 16, 32, 64, 128],
    "num_stages": [1, 2, 3, 4],
    "num_warps": [4, 8],
    "FP32_DOT": ["tf32x3", "ieee"],
    "MAXNREG": [0, 128],
    "PINGPONG": [False, True],
    "PERSISTENT": [False, True],
}
# Knobs that act only under some values of others (the search agent then skips moves that rebuild one kernel).
# num_warps, MAXNREG and BLOCK_M are not scoped to the tl.dot variants: gluon_ws falls back to the tma kernel.
KNOB_SCOPE = {"PINGPONG": {"VARIANT": ["gluon_ws"]}, "PERSISTENT": {"VARIANT": ["gluon_ws"]},
              "FP32_DOT": {"dtype": ["fp32"]}}

# PINGPONG (gluon_ws only) makes the two consumer warpgroups take turns issuing their wgmma (FA3's inter-warpgroup
# schedule, through two mbarriers): 516-521 / 897 / 505-510 us against 512-514 / 869-911 / 509 us without
# (bf16, round `gluon_ws2`), inside the spread: off by default. num_warps applies to the tl.dot kernels; the
# gluon_ws kernel always runs 4 + 4 + 1 warps (3 warpgroups, the load warp's padded).
# PERSISTENT (gluon_ws only): one block an SM walks the tiles (query block, batch x head) in strides of the
# grid, its K/V ring running on from one tile to the next, so the next tile's first copies overlap this one's
# epilogue; off: one block a tile. bf16, round `gluon_ws3`: 521-533 / 895-897 / 516-519 us against 521-527 /
# 905-909 / 513-521 us without (510.8 / 888.1 / 514.3 us with PINGPONG too, one run): inside the spread, off.
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
# Registers a thread of the warp-specialised kernel's second consumer warpgroup asks for (setmaxnreg): with the
# first at 256 and the load warp's warpgroup at 24, 128 x (256 + 232 + 24) = 65,536, the register file of one SM.
_WS_CONSUMER_REGS = 232
# Shared memory a block may use when the device does not report it: 227 KB on H100/H200.
_DEFAULT_SMEM_BYTES = 232448


@triton.jit
def _online_softmax_step(acc, m_i, l_i, q, k, v, cols, offs_m, S, qk_scale, MASKED: tl.constexpr,
                         CAUSAL: tl.constexpr, PRECISION: tl.constexpr, NEG_SCALE: tl.constexpr):
    """Fold one key block (k, v: [BLOCK_N, BLOCK_D]) into the running max m_i, sum l_i and output acc."""
    qk = tl.dot(q, tl.trans(k), input_precision=PRECISION)
    p, alpha, m_new, l_i = _scores_to_p(qk, m_i, l_i, offs_m, cols, S, qk_scale, MASKED, CAUSAL, NEG_SCALE)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PRECISION)
    return acc, m_new, l_i


@triton.jit
def _scores_to_p(qk, m_i, l_i, rows, cols, S, qk_scale, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
                 NEG_SCALE: tl.constexpr):
    """Online softmax of one block of scores qk = q k^T: (p, alpha to rescale the old rows, new max, new sum).
    The Gluon kernel calls it too: its tensors carry their layouts through these element-wise ops."""
    if MASKED:
        # Diagonal and ragged blocks (a few per row): scale first, then mask, so a zero scale cannot form
        # -inf * 0 = NaN.
        keep = cols[None, :] < S
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])
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
    return p, alpha, m_new, l_i * alpha + tl.sum(p, axis=1)


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


@gluon.jit
def _gl_softmax_block(s, m_i, l_i, rows, start_n, offs_n, lo_masked, S, qk_scale, CAUSAL: gl.constexpr,
                      NEG_SCALE: gl.constexpr):
    """The masked form only for the diagonal / ragged blocks (from lo_masked on), the FMA form elsewhere."""
    cols = start_n + offs_n
    if start_n >= lo_masked:
        p, alpha, m_new, l_new = _scores_to_p(s, m_i, l_i, rows, cols, S, qk_scale, True, CAUSAL, NEG_SCALE)
    else:
        p, alpha, m_new, l_new = _scores_to_p(s, m_i, l_i, rows, cols, S, qk_scale, False, CAUSAL, NEG_SCALE)
    return p, alpha, m_new, l_new


@gluon.jit
def _gl_take_turn(turn, WG: gl.constexpr, k, PINGPONG: gl.constexpr):
    """Before this warpgroup's k-th batch of wgmma (k = 0 .. n_blocks): wait until the other one has issued its
    own k-th (warpgroup 1) or (k-1)-th (warpgroup 0) batch, so the two alternate on the tensor cores."""
    if PINGPONG:
        if WG == 0:
            if k > 0:
                mbarrier.wait(turn.index(0), (k - 1) & 1)
        else:
            mbarrier.wait(turn.index(1), k & 1)


@gluon.jit
def _gl_give_turn(turn, WG: gl.constexpr, PINGPONG: gl.constexpr):
    if PINGPONG:
        mbarrier.arrive(turn.index(1 - WG), count=1)


@gluon.jit
def _gl_tile(tile, S, H, HKV, GROUP, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr,
             REVERSE: gl.constexpr):
    """Tile `tile` of the flattened grid, query blocks fastest (consecutive tiles share one head's K/V in L2):
    (start_m, first q row, first K/V row, end of the unmasked key blocks, key blocks to visit)."""
    n_m = gl.cdiv(S, BLOCK_M)
    start_m = tile % n_m
    if REVERSE:
        start_m = n_m - 1 - start_m
    bh = tile // n_m
    lo_masked, hi = _key_range(start_m, S, BLOCK_M, BLOCK_N, CAUSAL)
    return start_m, bh * S + start_m * BLOCK_M, ((bh // H) * HKV + (bh % H) // GROUP) * S, lo_masked, \
        gl.cdiv(hi, BLOCK_N)


@gluon.jit
def _gl_ws_consumer(WG: gl.constexpr, q_smem, k_smem, v_smem, full, empty, turn, q_full, q_empty, o_desc, first_tile,
                    n_tiles, tile_step, S, H, HKV, GROUP, qk_scale, BLOCK_M: gl.constexpr, CAUSAL: gl.constexpr,
                    REVERSE: gl.constexpr, NEG_SCALE: gl.constexpr, STAGES: gl.constexpr, PINGPONG: gl.constexpr):
    """One consumer warpgroup: query rows WG * 64 .. + 64 of each tile. Loop step j issues S(j) = q K(j)^T and
    O += P(j-1) V(j-1) as asynchronous wgmma, waits for S(j) only (`wgmma.wait_group 1`) and exponentiates it while
    the P V product is still on the tensor cores: the overlap tl.dot cannot express (Triton's pipeliner waits
    for q k^T before the softmax; carrying the scores across loop steps instead makes ptxas serialise every
    wgmma of the kernel, C7514). A finished key block is signalled through its stage's `empty` mbarrier (one
    arrival a warpgroup), not a barrier of the whole block, so the two warpgroups drift apart and one's softmax
    fills the other's tensor-core gaps: one kernel with that barrier ran 6-12% slower than the tl.dot kernel.
    `ring` counts the key blocks consumed (the stage and phase of the next), `batch` the wgmma batches issued
    (PINGPONG's turns); both run on across the tiles of a persistent block."""
    BLOCK_N: gl.constexpr = k_smem.shape[1]
    BLOCK_D: gl.constexpr = k_smem.shape[2]
    HALF: gl.constexpr = q_smem.shape[1]
    dtype: gl.constexpr = q_smem.dtype
    mma_s: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16])
    mma_o: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_D, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma_o, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, mma_s)
    row_o: gl.constexpr = gl.SliceLayout(1, mma_o)
    q_w = q_smem.index(WG)
    offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, mma_s))
    zero_s = gl.zeros([HALF, BLOCK_N], gl.float32, mma_s)
    ring = 0
    batch = 0
    done = 0
    for tile in range(first_tile, n_tiles, tile_step):
        start_m, q_row, _, lo_masked, n_blocks = _gl_tile(tile, S, H, HKV, GROUP, BLOCK_M, BLOCK_N, CAUSAL, REVERSE)
        rows = start_m * BLOCK_M + WG * HALF + gl.arange(0, HALF, layout=row_s)
        m_i = gl.full([HALF], float("-inf"), gl.float32, row_s)
        l_i = gl.zeros([HALF], gl.float32, row_s)
        o = gl.zeros([HALF, BLOCK_D], gl.float32, mma_o)
        mbarrier.wait(q_full, done & 1)
        mbarrier.wait(full.index(ring % STAGES), (ring // STAGES) & 1)
        _gl_take_turn(turn, WG, batch, PINGPONG)
        s_tok = warpgroup_mma(q_w, k_smem.index(ring % STAGES).permute((1, 0)), zero_s, use_acc=False,
                              is_async=True)
        _gl_give_turn(turn, WG, PINGPONG)
        s = warpgroup_mma_wait(0, deps=[s_tok])
        p, _, m_i, l_i = _gl_softmax_block(s, m_i, l_i, rows, 0, offs_n, lo_masked, S, qk_scale, CAUSAL, NEG_SCALE)
        p = gl.convert_layout(p.to(dtype), p_layout)
        for j in range(1, n_blocks):
            stage = (ring + j) % STAGES
            prev = (ring + j - 1) % STAGES
            mbarrier.wait(full.index(stage), ((ring + j) // STAGES) & 1)
            _gl_take_turn(turn, WG, batch + j, PINGPONG)
            s_tok = warpgroup_mma(q_w, k_smem.index(stage).permute((1, 0)), zero_s, use_acc=False, is_async=True)
            o_tok = warpgroup_mma(p, v_smem.index(prev), o, is_async=True)
            _gl_give_turn(turn, WG, PINGPONG)
            s = warpgroup_mma_wait(1, deps=[s_tok])
            p, alpha, m_i, l_i = _gl_softmax_block(s, m_i, l_i, rows, j * BLOCK_N, offs_n, lo_masked, S, qk_scale,
                                                   CAUSAL, NEG_SCALE)
            p = gl.convert_layout(p.to(dtype), p_layout)
            o = warpgroup_mma_wait(0, deps=[o_tok])
            mbarrier.arrive(empty.index(prev), count=1)  # this warpgroup is done with block j - 1's stage
            o = o * gl.convert_layout(alpha, row_o)[:, None]
        last = (ring + n_blocks - 1) % STAGES
        _gl_take_turn(turn, WG, batch + n_blocks, PINGPONG)
        o_tok = warpgroup_mma(p, v_smem.index(last), o, is_async=True)
        _gl_give_turn(turn, WG, PINGPONG)
        o = warpgroup_mma_wait(0, deps=[o_tok])
        mbarrier.arrive(empty.index(last), count=1)
        ring += n_blocks
        batch += n_blocks + 1
        o = o / gl.convert_layout(l_i, row_o)[:, None]
        q_w.store(o.to(dtype))  # this warpgroup's q rows are read by no wgmma now: they stage its output
        fence_async_shared()
        gl.thread_barrier()
        tma.async_copy_shared_to_global(o_desc, [q_row + WG * HALF, 0], q_w)
        tma.store_wait(0)
        mbarrier.arrive(q_empty, count=1)  # the copy engine has read the output: q's tile may be refilled
        done += 1


@gluon.jit
def _gl_ws_loader(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, full, empty, q_full, q_empty, first_tile, n_tiles,
                  tile_step, S, H, HKV, GROUP, BLOCK_M: gl.constexpr, CAUSAL: gl.constexpr, REVERSE: gl.constexpr,
                  STAGES: gl.constexpr):
    """The load warp: for each tile its K/V blocks into the STAGES-deep ring as fast as the consumers free the
    stages, and both q halves once the previous tile's output has left q's buffer. The q copy goes after the
    tile's first ring-full of K/V copies, so those are in flight during the previous tile's epilogue."""
    HALF: gl.constexpr = q_smem.shape[1]
    BLOCK_N: gl.constexpr = k_smem.shape[1]
    ring = 0
    done = 0
    for tile in range(first_tile, n_tiles, tile_step):
        _, q_row, kv_row0, _, n_blocks = _gl_tile(tile, S, H, HKV, GROUP, BLOCK_M, BLOCK_N, CAUSAL, REVERSE)
        q_after = gl.minimum(n_blocks, STAGES) - 1
        for j in range(n_blocks):
            stage = (ring + j) % STAGES
            if ring + j >= STAGES:  # both warpgroups are done with the block STAGES before this one
                mbarrier.wait(empty.index(stage), (((ring + j) // STAGES) - 1) & 1)
            mbarrier.expect(full.index(stage), 2 * k_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [kv_row0 + j * BLOCK_N, 0], full.index(stage), k_smem.index(stage))
            tma.async_copy_global_to_shared(v_desc, [kv_row0 + j * BLOCK_N, 0], full.index(stage), v_smem.index(stage))
            if j == q_after:
                if done > 0:
                    mbarrier.wait(q_empty, (done - 1) & 1)
                mbarrier.expect(q_full, 2 * q_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(q_desc, [q_row, 0], q_full, q_smem.index(0))
                tma.async_copy_global_to_shared(q_desc, [q_row + HALF, 0], q_full, q_smem.index(1))
        ring += n_blocks
        done += 1


@gluon.jit
def _attn_fwd_gluon_ws(q_desc, k_desc, v_desc, o_desc, qk_scale, S, H, HKV, GROUP, n_tiles,
                       BLOCK_D: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr,
                       REVERSE: gl.constexpr, NEG_SCALE: gl.constexpr, STAGES: gl.constexpr,
                       CONSUMER_REGS: gl.constexpr, PINGPONG: gl.constexpr = False):
    """sm_90, warp-specialised (FA3's structure): one load warp and two consumer warpgroups of 64 query rows
    each (the first is the kernel's own 4 warps, the second a worker partition). q/o descriptors hold 64-row
    tiles. A block takes tiles first_tile, first_tile + grid, ... of the n_tiles (query block, batch x head)
    tiles: one each when the grid covers them all, several in a persistent grid (PERSISTENT)."""
    dtype: gl.constexpr = q_desc.dtype
    HALF: gl.constexpr = BLOCK_M // 2
    first_tile = gl.program_id(0)
    tile_step = gl.num_programs(0)
    q_smem = gl.allocate_shared_memory(dtype, [2, HALF, BLOCK_D], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, BLOCK_D], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, BLOCK_D], v_desc.layout)
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    q_full = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    q_empty = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())  # PINGPONG: whose wgmma next
    for i in gl.static_range(STAGES):
        mbarrier.init(full.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # one arrival from each consumer warpgroup
    mbarrier.init(q_full, count=1)
    mbarrier.init(q_empty, count=2)
    mbarrier.init(turn.index(0), count=1)
    mbarrier.init(turn.index(1), count=1)
    gl.warp_specialize([
        (_gl_ws_consumer, (0, q_smem, k_smem, v_smem, full, empty, turn, q_full, q_empty, o_desc, first_tile,
                           n_tiles, tile_step, S, H, HKV, GROUP, qk_scale, BLOCK_M, CAUSAL, REVERSE, NEG_SCALE,
                           STAGES, PINGPONG)),
        (_gl_ws_consumer, (1, q_smem, k_smem, v_smem, full, empty, turn, q_full, q_empty, o_desc, first_tile,
                           n_tiles, tile_step, S, H, HKV, GROUP, qk_scale, BLOCK_M, CAUSAL, REVERSE, NEG_SCALE,
                           STAGES, PINGPONG)),
        (_gl_ws_loader, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, full, empty, q_full, q_empty, first_tile,
                         n_tiles, tile_step, S, H, HKV, GROUP, BLOCK_M, CAUSAL, REVERSE, STAGES)),
    ], [4, 1], [CONSUMER_REGS, 24])


def _auto_block_n(block_d):
    """BLOCK_N 0 ("auto"): 128 key rows when the head dim pads to 128 (D 65..128), 64 below. H200, tma, 128-row
    query blocks: 2x32x4096x128 bf16 566 / 984 / 583 us (causal / not / GQA) at 128 against 587 / 1,083 / 625 us
    at 64 with 4 stages (rounds `flash3`, `flash2`);
    8x12x1024x64 fp16 64.6 / 71.5 us at 64 against 99.3 / 112.1 us at 128 (round `hopper`)."""
    return 128 if block_d >= 128 else 64


# Read once a device: torch.cuda.get_device_properties costs 2.0 us a call on an H100 host, a hit here 0.09 us
# on the development CPU (timeit, h200.md seventeenth and eighteenth sessions); the launch path asks every call.
@functools.cache
def _smem_bytes(device):
    if device.type != "cuda":
        return _DEFAULT_SMEM_BYTES
    return getattr(torch.cuda.get_device_properties(device), "shared_memory_per_block_optin", _DEFAULT_SMEM_BYTES)


def _tma_ok(t):
    """A tensor descriptor needs a contiguous last dim and 16-byte aligned base and strides."""
    return (t.stride(-1) == 1 and t.data_ptr() % 16 == 0
            and all((st * t.element_size()) % 16 == 0 for st in t.stride()[:-1]))


def _gluon_ok(q, k, v, o, block_m, block_n, block_d):
    """VARIANT "gluon_ws" runs where its kernel can and wins: an sm_90 GPU (wgmma is Hopper's alone; sm_100 has
    tcgen05), 16-bit contiguous tensors in flat [rows, D] form (S a multiple of both blocks), 128-row query
    blocks (two 64-row consumer warpgroups) and D padding to 128. At D = 64 (8x12x1024x64 fp16, from a CUDA
    graph) it ran 62.4 / 83.6 us against the tma kernel's 53.7 / 70.1 us: its register split (setmaxnreg) holds
    one block an SM, where the tma kernel fits several. Elsewhere the tma kernel runs, or the pointer kernel where
    TMA cannot (fp32, unaligned rows)."""
    # ROCm reports its own gfx9 GPUs (MI200, MI300) as compute capability 9.x: CUDA only.
    if q.device.type != "cuda" or torch.version.hip is not None or torch.cuda.get_device_capability(q.device)[0] != 9:
        return False
    S = q.shape[2]
    return (q.element_size() == 2 and block_m == 128 and block_n in (64, 128) and block_d == 128
            and S % block_m == 0 and S % block_n == 0
            and all(t.is_contiguous() and _tma_ok(t) for t in (q, k, v, o)))


@functools.cache
def _sm_count(device):
    return torch.cuda.get_device_properties(device).multi_processor_count


_SMEM_LAYOUTS: dict = {}


def _smem_layout(rows, block_d, gl_dtype):
    """The swizzled shared-memory layout of a [rows, block_d] TMA tile, built once: building one costs ~9 us of
    host time (measured on the CPU), four a launch, and a GPT-2-sized attention runs in ~60 us."""
    key = (rows, block_d, str(gl_dtype))
    if key not in _SMEM_LAYOUTS:
        _SMEM_LAYOUTS[key] = gl.NVMMASharedLayout.get_default_for([rows, block_d], gl_dtype)
    return _SMEM_LAYOUTS[key]


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
    if cfg["VARIANT"] == "gluon_ws" and _gluon_ok(q, k, v, o, bm, bn, block_d):
        # Two stages at least: with one, the loader would wait for block j - 1's stage to be freed before loading
        # block j, while the consumers free it only after block j's scores (a hang).
        if stages >= 2:
            gl_dtype = gl.bfloat16 if q.dtype == torch.bfloat16 else gl.float16
            # q and o move in 64-row halves, one a consumer warpgroup.
            descs = [GluonTensorDescriptor.from_tensor(t.view(-1, D), [rows, block_d],
                                                       _smem_layout(rows, block_d, gl_dtype))
                     for t, rows in ((q, bm // 2), (k, bn), (v, bn), (o, bm // 2))]
            n_tiles = grid[0] * grid[1]
            blocks = min(n_tiles, _sm_count(q.device)) if cfg["PERSISTENT"] else n_tiles
            _attn_fwd_gluon_ws[(blocks,)](
                *descs, float(sm_scale) * math.log2(math.e), S, H, k.shape[1], H // k.shape[1], n_tiles,
                BLOCK_D=block_d, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=bool(causal), REVERSE=bool(cfg["REVERSE"]),
                NEG_SCALE=flags["NEG_SCALE"], STAGES=stages, CONSUMER_REGS=_WS_CONSUMER_REGS,
                PINGPONG=bool(cfg["PINGPONG"]), num_warps=4,
            )
            return
    if cfg["VARIANT"] in ("tma", "gluon_ws") and elem == 2 and all(_tma_ok(t) for t in (q, k, v, o)):
        # Flat 2-d rows need every tile inside one head: S a multiple of both blocks, heads packed.
        flat = S % bm == 0 and S % bn == 0 and all(t.is_contiguous() for t in (q, k, v, o))
        descs = [_descriptor(t, rows, block_d, flat) for t, rows in ((q, bm), (k, bn), (v, bn), (o, bm))]
        _attn_fwd_tma[grid](
            *descs, float(sm_scale) * math.log2(math.e), S, H, k.shape[1], H // k.shape[1],
            BLOCK_D=block_d, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=bool(causal), REVERSE=bool(cfg["REVERSE"]),
            UPCAST=upcast, FLAT=flat, num_stages=stages, num_warps=cfg["num_warps"], **flags,
        )
        return
    if cfg["VARIANT"] not in SEARCH_SPACE["VARIANT"]:
        raise ValueError(f"flash_attention CONFIG VARIANT must be one of {SEARCH_SPACE['VARIANT']}, got "
                         f"{cfg['VARIANT']!r}: pick one of those")
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
