"""The CUDA flash-attention mma kernel's fragment index math, replayed in Python (no GPU needed).

The PTX ISA documents which matrix elements each lane holds for `ldmatrix` (with and without .trans)
and for the A, B and C fragments of `mma.m16n8k16` (f16/bf16 inputs, f32 accumulators). This test
emulates those instructions on those documented layouts and drives them with the same lane/register
index expressions as kernels/cuda/flash_attention.py (namespace fa2): the Q/K/V ldmatrix addresses,
the score-tile to P-fragment register reuse, the quad (xor 1, xor 2) reductions, the online softmax
with its -inf guards, the causal block skip and the edge masks. The result must match
softmax(q k^T * scale) v. Shared-memory padding is filled with NaN so a read outside a row shows up.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from hopper_model import (
    FakeTensorMap,
    assert_registers_cover_setmaxnreg,
    cuobjdump,
    hopper_build,
    load_starter,
    tma_load,
    wg_desc,
    wgmma_operand,
)

INF = math.inf


def _g_t(lane):
    return lane >> 2, lane & 3


def ldsm_x4(smem, addr, trans=False):
    """ldmatrix.m8n8.x4(.trans).b16: lanes 8i..8i+7 give the row addresses of matrix i; result[lane][i] = (lo, hi)."""
    rows = [addr(lane) for lane in range(32)]
    out = []
    for lane in range(32):
        regs = []
        for i in range(4):
            if trans:  # lane holds column lane // 4, rows 2 (lane % 4) and + 1
                regs.append(tuple(smem[rows[8 * i + 2 * (lane % 4) + j] + lane // 4] for j in range(2)))
            else:  # lane holds row lane // 4, columns 2 (lane % 4) and + 1
                base = rows[8 * i + lane // 4] + 2 * (lane % 4)
                regs.append((smem[base], smem[base + 1]))
        out.append(regs)
    return out


def mma(c, a, b0, b1):
    """c[lane][0..3] += A B: A (16x16) from a[lane][0..3], B (16x8) from b0[lane], b1[lane], per the PTX layouts."""
    A = [[None] * 16 for _ in range(16)]
    B = [[None] * 8 for _ in range(16)]
    for lane in range(32):
        g, t = _g_t(lane)
        for j in range(2):
            A[g][2 * t + j] = a[lane][0][j]
            A[g + 8][2 * t + j] = a[lane][1][j]
            A[g][2 * t + 8 + j] = a[lane][2][j]
            A[g + 8][2 * t + 8 + j] = a[lane][3][j]
            B[2 * t + j][g] = b0[lane][j]
            B[2 * t + 8 + j][g] = b1[lane][j]
    assert all(x is not None for row in A for x in row) and all(x is not None for row in B for x in row)
    C = (torch.tensor(A, dtype=torch.float64) @ torch.tensor(B, dtype=torch.float64)).tolist()
    for lane in range(32):
        g, t = _g_t(lane)
        for j in range(2):
            c[lane][j] += C[g][2 * t + j]
            c[lane][2 + j] += C[g + 8][2 * t + j]


def shfl_xor(vals, mask):
    return [vals[lane ^ mask] for lane in range(32)]


def load_tile(x, row0, rows, ld):
    """load_tile<ROWS>: rows row0.. of x into a padded flat tile; past the end zero, padding NaN."""
    seq, d = x.shape
    tile = [math.nan] * (rows * ld)
    for r in range(rows):
        for c in range(d):
            tile[r * ld + c] = float(x[row0 + r, c]) if row0 + r < seq else 0.0
    return tile


def emulate(q, k, v, causal, scale_log2, warps, bn):
    """The fa2::attention kernel for one (batch, head): q, k, v are [S, D]."""
    seq, d = q.shape
    ld, bm = d + 8, 16 * warps
    out = torch.full((seq, d), math.nan, dtype=torch.float64)
    for mblock in range(math.ceil(seq / bm)):
        q0 = mblock * bm
        qs = load_tile(q, q0, bm, ld)
        kend = min(seq, q0 + bm) if causal else seq
        nblocks = (kend + bn - 1) // bn
        assert nblocks >= 1
        tiles = [(load_tile(k, j * bn, bn, ld), load_tile(v, j * bn, bn, ld)) for j in range(nblocks)]
        for warp in range(warps):
            qw = q0 + warp * 16
            qa = [ldsm_x4(qs, lambda lane, kc=kc, warp=warp: (warp * 16 + (lane & 15)) * ld + kc * 16 + (lane >> 4) * 8)
                  for kc in range(d // 16)]
            o = [[[0.0] * 4 for _ in range(d // 8)] for _ in range(32)]
            m_row = [[-INF, -INF] for _ in range(32)]
            l_row = [[0.0, 0.0] for _ in range(32)]
            for j in range(nblocks):
                n0 = j * bn
                kt, vt = tiles[j]
                if causal and n0 > qw + 15:
                    continue
                s = [[[0.0] * 4 for _ in range(bn // 8)] for _ in range(32)]
                for kc in range(d // 16):
                    for np_ in range(bn // 16):
                        kb = ldsm_x4(kt, lambda lane, np_=np_, kc=kc: (np_ * 16 + (lane & 7) + (lane >> 4) * 8) * ld
                                     + kc * 16 + ((lane >> 3) & 1) * 8)
                        a = [qa[kc][lane] for lane in range(32)]
                        for half in range(2):
                            acc = [s[lane][2 * np_ + half] for lane in range(32)]
                            mma(acc, a, [kb[lane][2 * half] for lane in range(32)],
                                [kb[lane][2 * half + 1] for lane in range(32)])
                edge = n0 + bn > seq or (causal and n0 + bn - 1 > qw)
                for lane in range(32):
                    g, t = _g_t(lane)
                    for nt in range(bn // 8):
                        for e in range(4):
                            x = s[lane][nt][e] * scale_log2
                            if edge:
                                key, row = n0 + nt * 8 + 2 * t + (e & 1), qw + g + 8 * (e >> 1)
                                if key >= seq or (causal and key > row):
                                    x = -INF
                            s[lane][nt][e] = x
                mu = [[0.0, 0.0] for _ in range(32)]
                for r in range(2):
                    mx = [max(max(s[lane][nt][2 * r], s[lane][nt][2 * r + 1]) for nt in range(bn // 8))
                          for lane in range(32)]
                    mx = [max(a, b) for a, b in zip(mx, shfl_xor(mx, 1), strict=True)]
                    mx = [max(a, b) for a, b in zip(mx, shfl_xor(mx, 2), strict=True)]
                    for lane in range(32):
                        m_new = max(m_row[lane][r], mx[lane])
                        mu[lane][r] = 0.0 if m_new == -INF else m_new
                        alpha = 2.0 ** (m_row[lane][r] - mu[lane][r])
                        m_row[lane][r] = m_new
                        l_row[lane][r] *= alpha
                        for dt in range(d // 8):
                            o[lane][dt][2 * r] *= alpha
                            o[lane][dt][2 * r + 1] *= alpha
                for lane in range(32):
                    for nt in range(bn // 8):
                        for e in range(4):
                            p = 2.0 ** (s[lane][nt][e] - mu[lane][e >> 1])
                            s[lane][nt][e] = p
                            l_row[lane][e >> 1] += p
                for kk in range(bn // 16):
                    pa = [[(s[lane][2 * kk][0], s[lane][2 * kk][1]), (s[lane][2 * kk][2], s[lane][2 * kk][3]),
                           (s[lane][2 * kk + 1][0], s[lane][2 * kk + 1][1]),
                           (s[lane][2 * kk + 1][2], s[lane][2 * kk + 1][3])] for lane in range(32)]
                    for dp in range(d // 16):
                        vb = ldsm_x4(vt, lambda lane, kk=kk, dp=dp: (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld
                                     + dp * 16 + (lane >> 4) * 8, trans=True)
                        for half in range(2):
                            acc = [o[lane][2 * dp + half] for lane in range(32)]
                            mma(acc, pa, [vb[lane][2 * half] for lane in range(32)],
                                [vb[lane][2 * half + 1] for lane in range(32)])
            for r in range(2):
                lsum = [l_row[lane][r] for lane in range(32)]
                lsum = [a + b for a, b in zip(lsum, shfl_xor(lsum, 1), strict=True)]
                lsum = [a + b for a, b in zip(lsum, shfl_xor(lsum, 2), strict=True)]
                for lane in range(32):
                    g, t = _g_t(lane)
                    inv = 1.0 / lsum[lane] if lsum[lane] > 0 else 0.0
                    row = qw + g + 8 * r
                    if row < seq:
                        for dt in range(d // 8):
                            out[row, dt * 8 + 2 * t] = o[lane][dt][2 * r] * inv
                            out[row, dt * 8 + 2 * t + 1] = o[lane][dt][2 * r + 1] * inv
    return out


def _reference(q, k, v, causal, scale):
    scores = (q @ k.T) * scale
    if causal:
        s = q.shape[0]
        scores = scores.masked_fill(~torch.ones(s, s, dtype=torch.bool).tril(), -INF)
    return torch.softmax(scores, dim=-1) @ v


@pytest.mark.parametrize(("seq", "d", "causal", "warps", "bn", "std"), [
    (17, 32, False, 2, 32, 1.0),  # ragged: one partial key block, rows past the end in the tile
    (40, 16, True, 2, 16, 1.0),   # causal across several blocks, diagonal blocks masked, warps skipping
    (33, 16, True, 1, 32, 5.0),   # peaked scores (~25 sigma): needs the running max; block 2 holds 1 key
    (1, 16, True, 2, 16, 1.0),    # a single row and key
    (70, 32, True, 2, 64, 1.0),   # causal with BLOCK_N > BLOCK_M: keys past the block's last row masked
])
def test_fragment_math_matches_attention(seq, d, causal, warps, bn, std):
    gen = torch.Generator().manual_seed(seq * 131 + d)
    q = torch.randn(seq, d, generator=gen, dtype=torch.float64) * std
    k = torch.randn(seq, d, generator=gen, dtype=torch.float64) * std
    v = torch.randn(seq, d, generator=gen, dtype=torch.float64)
    scale = 1.0 / math.sqrt(d)
    got = emulate(q, k, v, causal, scale * math.log2(math.e), warps, bn)
    want = _reference(q, k, v, causal, scale)
    assert not torch.isnan(got).any()
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


# ==== VARIANT "wgmma" (namespace fa3): TMA tiles, wgmma descriptors and register fragments, replayed on the CPU ====
# PTX ISA models (as in test_cuda_matmul_layout.py, restated here):
#   * TMA with CU_TENSOR_MAP_SWIZZLE_128B writes box row i, column j (16-bit) to byte dst + 128 i + 2 j, then XORs
#     address bits 4-6 with bits 7-9 (dst 1024-byte aligned); out-of-bounds elements arrive as zeros;
#   * wgmma reads a [rows x 16] operand through a descriptor (start, LBO, SBO, 128B swizzle):
#       K-major  (row mn, k kk) -> 128 (mn % 8) + SBO (mn / 8) + 2 kk
#       MN-major (mn, kk)       -> 2 (mn % 64) + LBO (mn / 64) + 128 (kk % 8) + SBO (kk / 8)
#     plus the start address, then the same XOR on the absolute address;
#   * accumulator fragment of m64nNk16 (figure wgmma-64N16-D): warp w, lane l, register i ->
#       row 16 w + l / 4 + 8 ((i / 2) % 2), col 8 (i / 4) + 2 (l % 4) + (i % 2);
#   * register A fragment of m64nNk16 (figure wgmma-64N16-A; an independent statement of the figure): warp w, lane l,
#     element e = 0..7 (register e / 2, low half first) -> row 16 w + l / 4 + 8 ((e / 2) % 2), col 8 (e / 4) +
#     2 (l % 4) + (e % 2). Spot checks from the figure: (w0, l0, e0..4) = (0,0) (0,1) (8,0) (8,1) (0,8);
#     (w3, l31, e7) = (63, 15); (w2, l17, e5) = (36, 11).
# The kernel-side formulas below (Q/K/V box destinations, TMA coordinates, descriptor arguments, the P packing
# 8 kk + 2 e, the mask and softmax indices, the epilogue) are copied from kernels/cuda/flash_attention.py (fa3):
# change them together.


_W, _L, _E = np.meshgrid(np.arange(4), np.arange(32), np.arange(8), indexing="ij")
A_ROW = 16 * _W + _L // 4 + 8 * ((_E // 2) % 2)  # register A fragment (figure wgmma-64N16-A)
A_COL = 8 * (_E // 4) + 2 * (_L % 4) + _E % 2


def _acc_coords(n):
    w, lane, i = np.meshgrid(np.arange(4), np.arange(32), np.arange(n // 2), indexing="ij")
    return 16 * w + lane // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (lane % 4) + i % 2


def _to_regs(mat):
    rows, cols = _acc_coords(mat.shape[1])
    return mat[rows, cols]


def _from_regs(regs, n):
    rows, cols = _acc_coords(n)
    mat = np.full((64, n), np.nan)
    mat[rows, cols] = regs
    assert not np.isnan(mat).any()
    return mat


def test_register_a_fragment_matches_the_ptx_figure_and_the_accumulator_columns():
    assert [(A_ROW[0, 0, e], A_COL[0, 0, e]) for e in range(5)] == [(0, 0), (0, 1), (8, 0), (8, 1), (0, 8)]
    assert (A_ROW[3, 31, 7], A_COL[3, 31, 7]) == (63, 15) and (A_ROW[2, 17, 5], A_COL[2, 17, 5]) == (36, 11)
    # A covers the 64 x 16 matrix once
    assert sorted(zip(A_ROW.ravel().tolist(), A_COL.ravel().tolist(), strict=True)) == [
        (r, c) for r in range(64) for c in range(16)]
    # the kernel's packing: A element e of k slice kk is accumulator register 8 kk + e (regs 2e', 2e'+1 of pair e')
    rows, cols = _acc_coords(128)
    for kk in range(8):
        assert (rows[:, :, 8 * kk:8 * kk + 8] == A_ROW).all()
        assert (cols[:, :, 8 * kk:8 * kk + 8] == A_COL + 16 * kk).all()


def _rs_wgmma(o_regs, pa, b_op):
    """O (registers) += A (register fragment pa[w, l, 0..7]) @ B, b_op = [N, 16] as wgmma reads it."""
    a = np.full((64, 16), np.nan)
    a[A_ROW, A_COL] = pa
    assert not np.isnan(a).any()
    return _to_regs(_from_regs(o_regs, b_op.shape[0]) + a @ b_op.T)


def _add_pv(o, p, vs, smem, kv_chunk, d, bn):
    """O += P V from the V tile at shared address vs: P's packed pairs (8 kk + 2 e, + 1) are A elements 2e, 2e + 1."""
    for kk in range(bn // 16):
        b_op = wgmma_operand(smem, wg_desc(vs + 2048 * kk, kv_chunk, 1024), d, True)
        o = _rs_wgmma(o, p[:, :, 8 * kk:8 * kk + 8], b_op)
    return o


def fa3_emulate(q, k, v, causal, sm_scale, bn, stages=2, smem_start=16, pipeline=0, blocks=None):
    """Every block of fa3::attention; q [B, H, S, D], k / v [B, Hkv, S, D] (float64). Producer and consumers run in
    program order (the ring's ordering is the mbarriers' job); everything else follows the kernel line by line.
    blocks (WG_PERSISTENT): that many blocks walk the tiles t = block, block + blocks, ..., each block's K/V ring
    running on from one tile to the next (the stage of a tile's key block j is (ring + j) % stages); None: one block
    a tile, in the kernel's tile order (query blocks fastest, reversed when causal).
    pipeline (WG_PIPELINE) >= 1: a block's P V is added one block later, before that block's rescale (the order of
    the overlapped kernel); 2: no block is skipped (ping-pong needs equal turns), a fully masked block adds p = 0.
    In float64 these orders give the serial result up to rounding: the emulation checks the bookkeeping (which block's
    P V lands when, the causal skip), not the asynchronous ordering; the SASS tests and the GPU tests cover that."""
    bsz, heads, seq, d = q.shape
    kv_heads = k.shape[1]
    assert seq % 128 == 0 and d in (64, 128)
    q2, k2, v2 = q.reshape(-1, d), k.reshape(-1, d), v.reshape(-1, d)
    q_chunk, kv_chunk, q_bytes, kv_bytes = 128 * 128, bn * 128, 128 * d * 2, bn * d * 2
    base = (smem_start + 1023) & ~1023
    kv0 = base + q_bytes
    smem = np.full((kv0 + stages * 2 * kv_bytes) // 2, np.nan)
    out = np.full((bsz * heads * seq, d), np.nan)
    scale_log2 = sm_scale * math.log2(math.e)
    lane = np.arange(32)[None, :, None]
    warp = np.arange(4)[:, None, None]
    n_m = seq // 128
    tiles = bsz * heads * n_m
    walks = [[t] for t in range(tiles)] if blocks is None else [range(b0, tiles, blocks) for b0 in range(blocks)]
    for walk in walks:
        ring = 0
        for t in walk:
            mblock = n_m - 1 - t % n_m if causal else t % n_m
            bh = t // n_m
            q0 = mblock * 128
            b, h = bh // heads, bh % heads
            hk = h // (heads // kv_heads)
            kend = min(seq, q0 + 128) if causal else seq
            nblocks = -(-kend // bn)
            q_row, kv_row = bh * seq + q0, (b * kv_heads + hk) * seq
            for c in range(d // 64):
                tma_load(smem, base + c * q_chunk, q2, 64 * c, q_row, 64, 128)
            state = {}
            for wg in (1, 2):
                state[wg] = dict(o=np.zeros((4, 32, d // 2)), m=np.full((2, 4, 32, 1), -INF), l=np.zeros((2, 4, 32, 1)),
                                 pending=None)
            for j in range(nblocks):
                s = (ring + j) % stages
                ks = kv0 + s * 2 * kv_bytes
                vs = ks + kv_bytes
                for c in range(d // 64):  # producer
                    tma_load(smem, ks + c * kv_chunk, k2, 64 * c, kv_row + j * bn, 64, bn)
                    tma_load(smem, vs + c * kv_chunk, v2, 64 * c, kv_row + j * bn, 64, bn)
                n0 = j * bn
                for wg in (1, 2):
                    st = state[wg]
                    row_base = q0 + (wg - 1) * 64
                    r0 = row_base + warp * 16 + (lane >> 2)
                    if causal and n0 > row_base + 63 and pipeline != 2:
                        continue
                    q_wg = base + (wg - 1) * 64 * 128
                    sacc = np.zeros((64, bn))
                    for kc in range(d // 16):
                        da = wg_desc(q_wg + (kc // 4) * q_chunk + 32 * (kc % 4), 16, 1024)
                        db = wg_desc(ks + (kc // 4) * kv_chunk + 32 * (kc % 4), 16, 1024)
                        sacc += wgmma_operand(smem, da, 64, False) @ wgmma_operand(smem, db, bn, False).T
                    sc = _to_regs(sacc)  # [4, 32, bn / 2]
                    i = np.arange(bn // 2)[None, None, :]
                    half = (i // 2) % 2
                    if causal and n0 + bn - 1 > row_base:
                        key = n0 + 8 * (i // 4) + 2 * (lane & 3) + (i & 1)
                        sc = np.where(key > r0 + 8 * half, -INF, sc)
                    mx = np.stack([np.where(half == r, sc, -INF).max(axis=2, keepdims=True) for r in range(2)])
                    for x in (1, 2):  # shfl_xor over lanes
                        mx = np.maximum(mx, mx[:, :, np.arange(32) ^ x])
                    m_new = np.maximum(st["m"], mx * scale_log2)
                    mu = np.where(m_new == -INF, 0.0, m_new)
                    alpha = np.exp2(st["m"] - mu)
                    st["m"], st["l"] = m_new, st["l"] * alpha
                    io = np.arange(d // 2)[None, None, :]
                    if pipeline and st["pending"] is not None:  # the previous block's P V lands before the rescale
                        st["o"] = _add_pv(st["o"], *st["pending"], smem, kv_chunk, d, bn)
                    st["o"] = st["o"] * np.where((io // 2) % 2 == 0, alpha[0], alpha[1])
                    p = np.exp2(sc * scale_log2 - np.where(half == 0, mu[0], mu[1]))
                    for r in range(2):
                        st["l"][r] += np.where(half == r, p, 0.0).sum(axis=2, keepdims=True)
                    if pipeline:
                        st["pending"] = (p, vs)
                    else:
                        st["o"] = _add_pv(st["o"], p, vs, smem, kv_chunk, d, bn)
            for wg in (1, 2):  # epilogue
                st = state[wg]
                if st["pending"] is not None:  # the pipelined kernel's last P V (its stage is still held)
                    st["o"] = _add_pv(st["o"], *st["pending"], smem, kv_chunk, d, bn)
                r0 = q0 + (wg - 1) * 64 + warp * 16 + (lane >> 2)
                for r in range(2):
                    lsum = st["l"][r]
                    lsum = lsum + lsum[:, np.arange(32) ^ 1]
                    lsum = lsum + lsum[:, np.arange(32) ^ 2]
                    inv = np.where(lsum > 0, 1.0 / lsum, 0.0)
                    for w in range(4):
                        for ln in range(32):
                            row = r0[w, ln, 0] + 8 * r
                            for jj in range(d // 8):
                                col = 8 * jj + 2 * (ln & 3)
                                for e in range(2):
                                    flat = bh * seq + row
                                    assert np.isnan(out[flat, col + e]), "an output element is written twice"
                                    out[flat, col + e] = st["o"][w, ln, 4 * jj + 2 * r + e] * inv[w, ln, 0]
            ring += nblocks
    assert not np.isnan(out).any(), "some output element was never written"
    return out.reshape(bsz, heads, seq, d)


@pytest.mark.parametrize(("b", "h", "hkv", "seq", "d", "causal", "bn"), [
    (1, 2, 1, 256, 64, True, 128),
    (1, 2, 2, 128, 128, False, 128),
    (1, 4, 2, 256, 128, True, 64),
    (2, 1, 1, 384, 64, False, 64),
    (1, 1, 1, 256, 128, True, 128),
])
@pytest.mark.parametrize("pipeline", [0, 1, 2])
@pytest.mark.parametrize("blocks", [None, 3], ids=["tile_a_block", "persistent3"])
def test_wgmma_emulated_kernel_computes_attention(b, h, hkv, seq, d, causal, bn, pipeline, blocks):
    """blocks 3 (WG_PERSISTENT): three blocks walk the 3-6 tiles, the ring's stages running on across tiles."""
    gen = torch.Generator().manual_seed(seq + d + bn)
    q = torch.randn(b, h, seq, d, generator=gen, dtype=torch.float64)
    k = torch.randn(b, hkv, seq, d, generator=gen, dtype=torch.float64)
    v = torch.randn(b, hkv, seq, d, generator=gen, dtype=torch.float64)
    scale = 1 / math.sqrt(d)
    got = fa3_emulate(q.numpy(), k.numpy(), v.numpy(), causal, scale, bn, stages=2 if bn == 128 else 3,
                      pipeline=pipeline, blocks=blocks)
    kk, vv = k.repeat_interleave(h // hkv, 1), v.repeat_interleave(h // hkv, 1)
    s = q @ kk.transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(torch.ones(seq, seq, dtype=torch.bool).triu(1), -INF)
    np.testing.assert_allclose(got, (torch.softmax(s, -1) @ vv).numpy(), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("bn", [64, 128])
def test_wgmma_v_descriptor_reads_v_transposed_element_by_element(bn):
    smem = np.full(65536, np.nan)
    v = np.arange(bn * 128, dtype=np.float64).reshape(bn, 128)  # a V tile [keys][D = 128]: two 64-column boxes
    for c in range(2):
        tma_load(smem, 8192 + c * bn * 128, v, 64 * c, 0, 64, bn)
    for kk in range(bn // 16):
        got = wgmma_operand(smem, wg_desc(8192 + 2048 * kk, bn * 128, 1024), 128, mn_major=True)
        np.testing.assert_array_equal(got, v[16 * kk:16 * kk + 16].T)  # B[k = key][n = d], read as [n][k]
        k_op = wgmma_operand(smem, wg_desc(8192 + (kk % 8 // 4) * bn * 128 + 32 * (kk % 4), 16, 1024), bn, False)
        np.testing.assert_array_equal(k_op, v[:, 16 * (kk % 8):16 * (kk % 8) + 16])  # the same tile read as K


# ---- the wgmma launcher on CPU tensors: tensor maps recorded, the kernel replaced by fa3_emulate ----
FA = load_starter("flash_attention", "cuda", "_cuda_flash_layout")


def _fake_launch(kernel, grid, block, args, shared_mem=0):
    assert kernel.startswith("flash_attention_wgmma_"), kernel
    out, map_q, map_k, map_v = args[:4]
    heads, kv_heads, seq, causal, scale_log2, tiles = (a.value for a in args[4:])
    bsz = out.shape[0]
    d = out.shape[3]
    bn = FA.CONFIG["WG_BLOCK_N"]
    assert tiles == seq // 128 * bsz * heads and tuple(block) == (384,)
    persistent = FA.CONFIG["WG_PERSISTENT"]
    walks = persistent == 2 or (persistent == 1 and not causal)  # one block an SM walks the tiles
    assert tuple(grid) == ((min(tiles, FAKE_SMS),) if walks else (seq // 128, bsz * heads))
    assert kernel.endswith(f"walk={int(walks)}"), kernel  # the build that walks, exactly when the grid does
    assert shared_mem == FA._wg_shared(d) <= 227 * 1024
    assert map_q.box == (128, 64) and map_k.box == map_v.box == (bn, 64)
    assert map_q.swizzle == map_k.swizzle == map_v.swizzle == 128
    assert map_q.rows.shape == (bsz * heads * seq, d) and map_k.rows.shape == (bsz * kv_heads * seq, d)
    got = fa3_emulate(map_q.rows.reshape(bsz, heads, seq, d), map_k.rows.reshape(bsz, kv_heads, seq, d),
                      map_v.rows.reshape(bsz, kv_heads, seq, d), bool(causal), scale_log2 / math.log2(math.e), bn,
                      FA._wg_stages(d), pipeline=FA.CONFIG["WG_PIPELINE"],  # the schedule kernel_fn builds
                      blocks=grid[0] if len(grid) == 1 else None)
    out.copy_(torch.from_numpy(got))


FAKE_SMS = 3  # the SM count the launcher is told in the emulated runs: fewer than the tiles, so blocks walk several


@pytest.mark.parametrize("bn", [64, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("persistent", [0, 1, 2])
def test_wgmma_kernel_fn_with_the_emulated_kernel(monkeypatch, dtype, bn, persistent):
    monkeypatch.setitem(FA.CONFIG, "VARIANT", "wgmma")
    monkeypatch.setitem(FA.CONFIG, "WG_BLOCK_N", bn)
    monkeypatch.setitem(FA.CONFIG, "WG_PERSISTENT", persistent)
    monkeypatch.setattr(FA, "_sm_count", lambda device: FAKE_SMS)
    monkeypatch.setattr(FA, "_wgmma_arch", lambda device: "sm_90a")
    monkeypatch.setattr(FA.nvrtc, "compile_kernel", lambda src, name, defines=None, arch=None, source_name=None:
                        (arch == "sm_90a" or pytest.fail(arch)) and f"{name} walk={defines['WG_PERSISTENT']}")
    monkeypatch.setattr(FA.nvrtc, "tensor_map", FakeTensorMap)
    monkeypatch.setattr(FA.nvrtc, "launch", _fake_launch)
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(1, 4, 256, 64, generator=gen).to(dtype)
    k = torch.randn(1, 2, 256, 64, generator=gen).to(dtype)
    v = torch.randn(1, 2, 256, 64, generator=gen).to(dtype)
    for causal in (False, True):
        got = FA.kernel_fn(q, k, v, causal, 0.125)
        kk, vv = k.double().repeat_interleave(2, 1), v.double().repeat_interleave(2, 1)
        s = q.double() @ kk.transpose(-1, -2) * 0.125
        if causal:
            s = s.masked_fill(torch.ones(256, 256, dtype=torch.bool).triu(1), -INF)
        expected = torch.softmax(s, -1) @ vv
        assert got.dtype == dtype and torch.allclose(got.double(), expected, atol=1e-2, rtol=1e-2)


def _on_hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


@pytest.mark.skipif(not _on_hopper(), reason="needs an sm_90 GPU (H100 / H200)")
@pytest.mark.parametrize("bn", [64, 128])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize(("pipeline", "pin"), [(0, 0), (1, 0), (2, 0), (1, 1), (2, 1)])
def test_wgmma_kernel_on_the_gpu_in_both_16_bit_dtypes(monkeypatch, dtype, d, bn, pipeline, pin):
    """The real sm_90a kernel (not the fallback: the launcher is spied on) against the spec's reference, causal and
    not, GQA 4:2, S = 384 (three 128-row query blocks), in fp16 and bf16, under every WG_PIPELINE schedule."""
    from autokernel_ci.compare import compare
    from autokernel_ci.specs import get_spec

    spec = get_spec("flash_attention")
    ran = []
    real = FA._launch_wgmma
    monkeypatch.setitem(FA.CONFIG, "VARIANT", "wgmma")
    monkeypatch.setitem(FA.CONFIG, "WG_BLOCK_N", bn)
    monkeypatch.setitem(FA.CONFIG, "WG_PIPELINE", pipeline)
    monkeypatch.setitem(FA.CONFIG, "WG_PIN", pin)
    monkeypatch.setattr(FA, "_launch_wgmma", lambda *a: ran.append(real(*a)) or ran[-1])
    gen = torch.Generator(device="cuda").manual_seed(5)
    for causal in (True, False):
        inputs = spec.make_inputs({"B": 1, "H": 4, "Hkv": 2, "S": 384, "D": d, "causal": causal}, dtype,
                                  torch.device("cuda"), gen)
        out = FA.kernel_fn(*inputs)
        torch.cuda.synchronize()
        failure = compare(out, spec.run_reference(inputs), spec.tolerances[dtype], expect_dtype=dtype)
        assert failure is None, failure
    assert ran == [True, True], "the wgmma kernel did not run (fallback to mma)"


@pytest.mark.skipif(not _on_hopper(), reason="needs an sm_90 GPU (H100 / H200)")
@pytest.mark.parametrize(("d", "dtype"), [(128, torch.bfloat16), (64, torch.float16)], ids=["d128-bf16", "d64-fp16"])
@pytest.mark.parametrize("pipeline", [1, 2])
@pytest.mark.parametrize("persistent", [1, 2])
def test_persistent_wgmma_kernel_walks_more_tiles_than_sms(monkeypatch, persistent, pipeline, d, dtype):
    """WG_PERSISTENT: one block an SM walks 2 x 8 heads x 16 query blocks = 256 tiles (GQA 8/2), the K/V ring and
    Q's buffer running on from tile to tile; 1 only when not causal, 2 always. Checked against the spec's reference
    (peaked and plain scores), with the launch grid recorded."""
    from autokernel_ci.compare import compare
    from autokernel_ci.specs import get_spec

    spec = get_spec("flash_attention")
    grids = []
    real_launch = FA.nvrtc.launch
    monkeypatch.setitem(FA.CONFIG, "VARIANT", "wgmma")
    monkeypatch.setitem(FA.CONFIG, "WG_PIPELINE", pipeline)
    monkeypatch.setitem(FA.CONFIG, "WG_PERSISTENT", persistent)
    monkeypatch.setattr(FA.nvrtc, "launch", lambda kernel, grid, **kw: grids.append(tuple(grid)) or
                        real_launch(kernel, grid=grid, **kw))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    gen = torch.Generator(device="cuda").manual_seed(11)
    for causal in (False, True):
        inputs = spec.make_inputs({"B": 2, "H": 8, "Hkv": 2, "S": 2048, "D": d, "causal": causal}, dtype,
                                  torch.device("cuda"), gen)
        for scale in (1.0, 8.0):  # 8: peaked rows, where a stale row max or sum from the previous tile would show
            q, k, v, c, sm_scale = inputs
            case = (q * scale, k, v, c, sm_scale)
            out = FA.kernel_fn(*case)
            torch.cuda.synchronize()
            failure = compare(out, spec.run_reference(case), spec.tolerances[dtype], expect_dtype=dtype)
            assert failure is None, (causal, scale, failure)
        walks = persistent == 2 or not causal
        assert grids[-1] == ((min(256, sms),) if walks else (16, 16)), grids


def test_wgmma_falls_back_to_mma_where_it_cannot_run(monkeypatch):
    launched = []
    monkeypatch.setitem(FA.CONFIG, "VARIANT", "wgmma")
    monkeypatch.setattr(FA.nvrtc, "compile_kernel", lambda src, name, **kw: name)
    monkeypatch.setattr(FA.nvrtc, "launch", lambda kernel, **kw: launched.append(kernel))
    q = torch.ones(1, 2, 128, 64, dtype=torch.bfloat16)
    FA.kernel_fn(q, q, q, True, 0.125)  # a CPU tensor: no sm_90 device
    assert launched == ["flash_attention_mma_bf16"]
    monkeypatch.setattr(FA, "_wgmma_arch", lambda device: "sm_90a")
    monkeypatch.setattr(FA.nvrtc, "tensor_map", FakeTensorMap)
    cases = [
        (torch.ones(1, 2, 100, 64, dtype=torch.bfloat16),) * 3,  # ragged S
        (torch.ones(1, 2, 128, 32, dtype=torch.float16),) * 3,  # D = 32
        (torch.ones(1, 2, 128, 64),) * 3,  # fp32 (the WMMA kernel)
        (torch.ones(1, 128, 2, 64, dtype=torch.bfloat16).transpose(1, 2),) * 3,  # strided [B, S, H, D] view
    ]
    for q, k, v in cases:
        FA.kernel_fn(q, k, v, False, 0.125)
    FA.kernel_fn(*(torch.ones(1, 2, 128, 64, dtype=torch.bfloat16),) * 3, False, -0.125)  # sm_scale <= 0
    assert launched[1:] == ["flash_attention_mma_bf16", "flash_attention_mma_f16", "flash_attention_wmma_f32",
                            "flash_attention_mma_bf16", "flash_attention_mma_bf16"]

    def refuse(t, box, swizzle=128):
        raise FA.nvrtc.TensorMapError("cuda.bindings is not installed")

    monkeypatch.setattr(FA.nvrtc, "tensor_map", refuse)
    with pytest.warns(RuntimeWarning, match="falls back"):
        FA.kernel_fn(*(torch.ones(1, 2, 128, 64, dtype=torch.bfloat16),) * 3, False, 0.125)
    assert launched[-1] == "flash_attention_mma_bf16"


def test_every_wgmma_search_space_point_fits_shared_memory():
    original = dict(FA.CONFIG)
    try:
        for bn in FA.SEARCH_SPACE["WG_BLOCK_N"]:
            for stages in FA.SEARCH_SPACE["WG_STAGES"]:
                for d in FA.WG_HEAD_DIMS:
                    FA.CONFIG.update(WG_BLOCK_N=bn, WG_STAGES=stages)
                    st = FA._defines(d)["WG_STAGES"]
                    assert 2 <= st <= stages
                    q_bytes, kv_bytes = 128 * d * 2, bn * d * 2
                    # 1023 bytes of round-up, the tiles, (2 + 2 stages) mbarriers of 8 bytes
                    assert 1023 + q_bytes + 2 * st * kv_bytes + 8 * (2 + 2 * st) <= FA._wg_shared(d) <= 227 * 1024
    finally:
        FA.CONFIG.clear()
        FA.CONFIG.update(original)


# ---- what nvcc makes of fa3 for sm_90a (the build the H200 runs) ----
def _backward_branches(sass: str) -> list[tuple[int, int]]:
    """(target, branch) addresses of the backward branches in cuobjdump's SASS: the loops."""
    found = re.findall(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?BRA (0x[0-9a-f]+)", sass)
    return [(int(target, 16), int(at, 16)) for at, target in found if int(target, 16) < int(at, 16)]


def _sass_span(sass: str, start: int, end: int) -> str:
    """The SASS lines at addresses start..end."""
    return "\n".join(line for line in sass.splitlines()
                     if (m := re.search(r"/\*([0-9a-f]{4,})\*/", line)) and start <= int(m.group(1), 16) <= end)



@pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize(("bn", "pipeline", "persistent"),
                         [(bn, pipeline, 0) for bn in (128, 64) for pipeline in (0, 1, 2)] + [(128, 2, 1), (128, 1, 1)])
def test_wgmma_build_uses_hgmma_with_register_a_and_tma_without_spills(tmp_path, bn, pipeline, persistent):
    """The sm_90a build's SASS: the wgmma forms, the overlap's wait, no spill. WG_PERSISTENT adds the second Q copy
    (the later tiles' Q, loaded after their first ring-full of K/V) and nothing else to the loop."""
    import re
    import subprocess

    from autokernel_ci import nvrtc

    source, defines, names, arch = hopper_build(FA, WG_BLOCK_N=bn, WG_PIPELINE=pipeline, WG_PERSISTENT=persistent)
    assert arch == "sm_90a" and defines["HEAD_DIM"] == 128
    cubin = tmp_path / "fa.cubin"
    result = nvrtc.compile_check(source, arch, defines=defines, source_name="flash_attention.cu", ptxas_verbose=True,
                                 keep_cubin=cubin)
    log = result.log.splitlines()
    for name in ("flash_attention_wgmma_f16", "flash_attention_wgmma_bf16"):
        at = next(i for i, line in enumerate(log) if f"Function properties for {name}" in line)
        assert "0 bytes spill stores, 0 bytes spill loads" in log[at + 1], log[at + 1]
        assert_registers_cover_setmaxnreg(result.log, name)
    cuobjdump_bin = cuobjdump()
    if cuobjdump_bin is None:
        pytest.skip("cuobjdump not found")
    sass = subprocess.run([cuobjdump_bin, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    body = sass.split("Function : flash_attention_wgmma_bf16")[1].split("Function :")[0]
    # The pipelined consumer: block 0's S = Q K^T peeled, the loop twice (unmasked, then the causal diagonal's
    # masked blocks), the last block's P V peeled: three copies of each wgmma.
    copies = 1 if pipeline == 0 else 3
    copies *= defines["WG_CONSUMER_COPIES"]  # 2: a consumer loop per warpgroup
    # S = Q K^T: both operands from shared memory (descriptors), N = BN
    assert len(re.findall(rf"HGMMA\.64x{bn}x16\.F32\.BF16 R\d+, gdesc\[UR\d+\]", body)) == copies * 128 // 16
    # O += P V: A = P from registers, B = V through the transpose bit, N = D
    assert len(re.findall(r"HGMMA\.64x128x16\.F32\.BF16 R\d+, R\d+, gdesc\[UR\d+\]\.tnspB", body)) == copies * bn // 16
    # Overlap: a wait that leaves one group (P V) in flight; ping-pong: the named-barrier turns.
    assert ("WARPGROUP.DEPBAR.LE gsb0, 0x1" in body) == (pipeline >= 1)
    assert ("BAR.ARV" in body) == (pipeline == 2)
    if pipeline >= 1:  # a loop (a backward branch's span) with one key block's wgmma and no causal mask: the mask
        # is one select a score (bn / 2 a thread); the unmasked loop keeps only the row max's -inf guards (2)
        loops = [_sass_span(body, start, end) for start, end in _backward_branches(body)]
        fsel = [span.count("FSEL") for span in loops if span.count("HGMMA") == 128 // 16 + bn // 16]
        assert min(fsel) <= 2 and max(fsel) >= bn // 2, fsel
    # Q's two boxes (twice when persistent), K's and V's two boxes
    assert body.count("UTMALDG.2D") == 6 + 2 * persistent and "USETMAXREG" in body and "SYNCS.PHASECHK" in body


@pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="nvcc not installed")
def test_consumer_copies_build_the_descriptors_in_uniform_registers(tmp_path):
    """WG_CONSUMER_COPIES 2: a consumer loop per warpgroup (twice the wgmma), whose descriptors ptxas keeps in uniform
    registers (few R2UR moves a wgmma) and whose Q K^T starts with scale-d 0 (no zeroing CS2R); 1: one shared loop."""
    import re
    import subprocess

    from autokernel_ci import nvrtc

    cuobjdump_bin = cuobjdump()
    if cuobjdump_bin is None:
        pytest.skip("cuobjdump not found")
    counts = {}
    for copies in (1, 2):
        # The one-tile build: the walk (WG_PERSISTENT) divides the tile index by the query blocks, which leaves its
        # descriptors in vector registers either way.
        source, defines, _, arch = hopper_build(FA, WG_CONSUMER_COPIES=copies, WG_PERSISTENT=0)
        cubin = tmp_path / f"fa{copies}.cubin"
        nvrtc.compile_check(source, arch, defines=defines, source_name="flash_attention.cu", keep_cubin=cubin)
        sass = subprocess.run([cuobjdump_bin, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
        body = sass.split("Function : flash_attention_wgmma_bf16")[1].split("Function :")[0]
        counts[copies] = {op: len(re.findall(rf"\b{op}\b", body)) for op in ("HGMMA", "R2UR", "CS2R")}
    assert counts[2]["HGMMA"] == 2 * counts[1]["HGMMA"]
    assert counts[2]["R2UR"] / counts[2]["HGMMA"] <= 0.5 * counts[1]["R2UR"] / counts[1]["HGMMA"], counts
    assert counts[2]["CS2R"] < counts[1]["CS2R"], counts


@pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize("pipeline", [1, 2])
def test_wg_pin_keeps_the_softmax_exponentials_before_the_pv_wait(tmp_path, pipeline):
    """WG_PIN 1: in the loop's SASS the softmax's MUFU.EX2 sit between the wait that leaves P V in flight (LE 1) and
    the wait for it (LE 0), so they overlap P V. (Without the pin nvcc 13.0 put all of them after the second wait.)"""
    import subprocess

    from autokernel_ci import nvrtc

    source, defines, _, arch = hopper_build(FA, WG_PIPELINE=pipeline, WG_PIN=1)
    cubin = tmp_path / "fa.cubin"
    nvrtc.compile_check(source, arch, defines=defines, source_name="flash_attention.cu", keep_cubin=cubin)
    cuobjdump_bin = cuobjdump()
    if cuobjdump_bin is None:
        pytest.skip("cuobjdump not found")
    sass = subprocess.run([cuobjdump_bin, "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    body = sass.split("Function : flash_attention_wgmma_bf16")[1].split("Function :")[0]
    between = body.split("WARPGROUP.DEPBAR.LE gsb0, 0x1")[1].split("WARPGROUP.DEPBAR.LE gsb0, 0x0")[0]
    assert between.count("MUFU.EX2") >= defines["WG_BLOCK_N"] // 2  # one exponential per score a thread holds


def test_batch_times_heads_past_the_grid_limit_is_refused_with_the_fix():
    q = torch.zeros(FA.MAX_GRID_Y // 4 + 1, 4, 1, 16)
    with pytest.raises(ValueError, match=r"B\*H=65536 exceeds .* at most 16383 sequences"):
        FA.kernel_fn(q, q, q, False, 0.25)


@pytest.mark.parametrize("d", [64, 128])
def test_the_remembered_build_follows_config_changed_in_place(monkeypatch, d):
    """_build is kept by CONFIG's items and the head dim: a CONFIG edited in place (the tests, the search agent's
    in-process points) gets its own defines and shared-memory sizes, and the old ones come back with the old CONFIG."""
    build = FA._build(d)
    assert FA._build(d) is build and FA._defines(d) is build[0]
    assert FA._build(d, True)[0]["WG_PERSISTENT"] == 1 and build[0]["WG_PERSISTENT"] == 0
    monkeypatch.setitem(FA.CONFIG, "WG_BLOCK_N", 64 if FA.CONFIG["WG_BLOCK_N"] == 128 else 128)
    monkeypatch.setitem(FA.CONFIG, "BLOCK_N", 32 if FA.CONFIG["BLOCK_N"] != 32 else 64)
    defines, wg_shared, mma_shared = FA._build(d)
    assert defines["WG_BLOCK_N"] == FA.CONFIG["WG_BLOCK_N"] != build[0]["WG_BLOCK_N"]
    assert (wg_shared, mma_shared) == (FA._wg_shared(d), FA._shared_bytes(d))
    assert (wg_shared, mma_shared) != build[1:]
    monkeypatch.undo()
    assert FA._build(d) is build
