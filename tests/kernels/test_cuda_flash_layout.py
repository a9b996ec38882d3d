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

import pytest
import torch

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
