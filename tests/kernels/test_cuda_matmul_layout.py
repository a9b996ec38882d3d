"""CPU emulation of the index math of kernels/cuda/matmul.py's mma.sync kernel (no GPU needed).

The CUDA kernel cannot run here, so this file re-states its index formulas in Python, line for line
(names as in the CUDA source: swz, load_stage, the ldmatrix lane addresses, the epilogue), and runs
them against independent models of the hardware taken from the PTX ISA:
  * ldmatrix .x4: lanes 8q..8q+7 give the row addresses of 8x8 matrix q; register q of lane l holds
    row l/4, cols 2(l%4), 2(l%4)+1 (plain) or rows 2(l%4), 2(l%4)+1 of col l/4 (.trans);
  * mma.m16n8k16 (.f16/.bf16): g = lane/4, t = lane%4; a_i at row g + 8*((i/2)%2), col 2t + (i%2) + 8*(i>=4);
    b_i at row 2t + (i%2) + 8*(i>=2), col g; c_i at row g + 8*(i>=2), col 2t + (i%2).
A whole block-tile product is emulated with ragged M/N/K edges for both b layouts and compared with
numpy's matmul. If a formula changes in the CUDA source, change it here too.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from hopper_model import (
    FakeTensorMap,
    assert_registers_cover_setmaxnreg,
    cuobjdump,
    desc_plus,
    hopper_build,
    load_starter,
    tma_load,
    tma_store,
    wg_desc,
    wgmma_operand,
)

MODULE = load_starter("matmul", "cuda", "_cuda_matmul_layout")
LANES = np.arange(32)


# ---- the kernel's formulas (CUDA: swz, load_stage, ldmatrix addresses, epilogue) ----
def swz(cpr: int, r: int, c: int) -> int:
    if cpr % 8 == 0:
        return (r * cpr + (c ^ (r & 7))) * 8
    if cpr == 4:
        return (r * 4 + (c ^ ((r >> 1) & 3))) * 8
    assert cpr == 2
    return (r * 2 + (c ^ ((r >> 2) & 1))) * 8


class Tile:
    def __init__(self, tile: str, bk: int, kmajor: bool, stages: int = 3, group_m: int = 8):
        block, warps = tile.split("_")
        self.bm, self.bn = (int(v) for v in block.split("x"))
        self.warps_m, self.warps_n = (int(v) for v in warps.split("x"))
        self.bk, self.kmajor, self.stages, self.group_m = bk, kmajor, stages, group_m
        self.threads = self.warps_m * self.warps_n * 32
        self.wtm, self.wtn = self.bm // self.warps_m, self.bn // self.warps_n
        self.mi, self.ni = self.wtm // 16, self.wtn // 8
        self.a_cpr = bk // 8
        self.b_cpr = bk // 8 if kmajor else self.bn // 8
        self.a_elems = self.bm * bk
        self.stage_elems = (self.bm + self.bn) * bk

    def block_origin(self, block: int, m: int, n: int) -> tuple[int, int]:
        tiles_m, tiles_n = -(-m // self.bm), -(-n // self.bn)
        per_group = self.group_m * tiles_n
        first_m = (block // per_group) * self.group_m
        group_rows = min(tiles_m - first_m, self.group_m)
        in_group = block % per_group
        return (first_m + in_group % group_rows) * self.bm, (in_group // group_rows) * self.bn

    def load_stage(self, smem, stage, k0, a, b, m, n, k, bm, bn):
        """cp.async of one K slice: 16-byte chunks, src-size bytes copied, the rest zero-filled."""
        base = stage * self.stage_elems

        def copy(dst, src_row, start, limit):
            count = max(0, min(8, limit - start))  # min(16, (limit - start) * 2) bytes of 16-bit elements
            smem[dst:dst + 8] = 0.0
            smem[dst:dst + count] = src_row[start:start + count]

        for idx in range(self.bm * self.bk // 8):
            r, c = divmod(idx, self.a_cpr)
            gr, gk = bm + r, k0 + c * 8
            dst = base + swz(self.a_cpr, r, c)
            if gr < m and gk < k:
                copy(dst, a[gr], gk, k)
            else:
                smem[dst:dst + 8] = 0.0
        for idx in range(self.bn * self.bk // 8):
            r, c = divmod(idx, self.b_cpr)
            dst = base + self.a_elems + swz(self.b_cpr, r, c)
            if self.kmajor:  # b given as W [N, K]: row r = output column bn + r
                gn, gk = bn + r, k0 + c * 8
                if gn < n and gk < k:
                    copy(dst, b[gn], gk, k)
                else:
                    smem[dst:dst + 8] = 0.0
            else:  # b [K, N]: row r = k0 + r
                gk, gn = k0 + r, bn + c * 8
                if gk < k and gn < n:
                    copy(dst, b[gk], gn, n)
                else:
                    smem[dst:dst + 8] = 0.0

    def a_addr(self, wm, i, ks, lane):
        return swz(self.a_cpr, wm + i * 16 + (lane & 15), 2 * ks + (lane >> 4))

    def b_addr(self, wn, jj, ks, lane):
        if self.kmajor:
            row = wn + jj * 16 + (lane & 7) + ((lane >> 4) << 3)
            return self.a_elems + swz(self.b_cpr, row, 2 * ks + ((lane >> 3) & 1))
        return self.a_elems + swz(self.b_cpr, ks * 16 + (lane & 15), (wn + jj * 16) // 8 + (lane >> 4))


# ---- hardware models (PTX ISA) ----
def ldmatrix_x4(smem, addrs, trans: bool) -> np.ndarray:
    """regs[lane, q, half] of ldmatrix.x4 given the 32 lane addresses (element offsets, 16-byte aligned)."""
    assert all(a % 8 == 0 for a in addrs), "ldmatrix row addresses must be 16-byte aligned"
    mats = np.stack([np.stack([smem[addrs[8 * q + row]:addrs[8 * q + row] + 8] for row in range(8)]) for q in range(4)])
    regs = np.empty((32, 4, 2))
    for lane in range(32):
        for h in range(2):
            if trans:
                regs[lane, :, h] = mats[:, 2 * (lane % 4) + h, lane // 4]
            else:
                regs[lane, :, h] = mats[:, lane // 4, 2 * (lane % 4) + h]
    return regs


def _fragment_coords():
    g, t = LANES // 4, LANES % 4
    a_rows = np.stack([g + 8 * ((i // 2) % 2) for i in range(8)], 1)
    a_cols = np.stack([2 * t + (i % 2) + 8 * (i >= 4) for i in range(8)], 1)
    b_rows = np.stack([2 * t + (i % 2) + 8 * (i >= 2) for i in range(4)], 1)
    b_cols = np.stack([g for _ in range(4)], 1)
    c_rows = np.stack([g + 8 * (i >= 2) for i in range(4)], 1)
    c_cols = np.stack([2 * t + (i % 2) for i in range(4)], 1)
    return a_rows, a_cols, b_rows, b_cols, c_rows, c_cols


A_ROWS, A_COLS, B_ROWS, B_COLS, C_ROWS, C_COLS = _fragment_coords()


def mma_m16n8k16(acc, a_regs, b_regs):
    """acc[lane, 4] += A @ B with A, B rebuilt from a_regs[lane, 4 regs, 2 halves], b_regs[lane, 2, 2]."""
    a = np.zeros((16, 16))
    a[A_ROWS, A_COLS] = a_regs.reshape(32, 8)
    b = np.zeros((16, 8))
    b[B_ROWS, B_COLS] = b_regs.reshape(32, 4)
    c = np.zeros((16, 8))
    c[C_ROWS, C_COLS] = acc
    return (c + a @ b)[C_ROWS, C_COLS]


def emulate(tile: Tile, a: np.ndarray, b_arg: np.ndarray, m: int, n: int, k: int) -> np.ndarray:
    """The kernel for every block, slice by slice; b_arg is b [K,N] or, k-major, W [N,K] (b = W.T)."""
    out = np.full((m, n), np.nan)
    smem = np.full(tile.stages * tile.stage_elems, np.nan)
    blocks = -(-m // tile.bm) * -(-n // tile.bn)
    for block in range(blocks):
        bm, bn = tile.block_origin(block, m, n)
        acc = np.zeros((tile.warps_m * tile.warps_n, tile.mi, tile.ni, 32, 4))
        ktiles = -(-k // tile.bk)
        for kt in range(ktiles):  # the pipeline's order is checked separately (test_pipeline_schedule)
            stage = kt % tile.stages
            tile.load_stage(smem, stage, kt * tile.bk, a, b_arg, m, n, k, bm, bn)
            view = smem[stage * tile.stage_elems:(stage + 1) * tile.stage_elems]
            for warp in range(tile.warps_m * tile.warps_n):
                wm, wn = (warp // tile.warps_n) * tile.wtm, (warp % tile.warps_n) * tile.wtn
                for ks in range(tile.bk // 16):
                    af = [ldmatrix_x4(view, [tile.a_addr(wm, i, ks, ln) for ln in range(32)], False)
                          for i in range(tile.mi)]
                    bf = [None] * tile.ni
                    for jj in range(tile.ni // 2):
                        r = ldmatrix_x4(view, [tile.b_addr(wn, jj, ks, ln) for ln in range(32)], not tile.kmajor)
                        bf[2 * jj], bf[2 * jj + 1] = r[:, 0:2], r[:, 2:4]
                    for i in range(tile.mi):
                        for j in range(tile.ni):
                            acc[warp, i, j] = mma_m16n8k16(acc[warp, i, j], af[i], bf[j])
        for warp in range(tile.warps_m * tile.warps_n):  # epilogue
            wm, wn = (warp // tile.warps_n) * tile.wtm, (warp % tile.warps_n) * tile.wtn
            for i in range(tile.mi):
                for j in range(tile.ni):
                    for lane in range(32):
                        col = bn + wn + j * 8 + (lane & 3) * 2
                        for h in range(2):
                            row = bm + wm + i * 16 + (lane >> 2) + h * 8
                            if row >= m or col >= n:
                                continue
                            assert np.isnan(out[row, col]), "an output element is written twice"
                            out[row, col] = acc[warp, i, j, lane, 2 * h]
                            if col + 1 < n:
                                out[row, col + 1] = acc[warp, i, j, lane, 2 * h + 1]
    return out


# ---- tests ----
CASES = [  # (TILE, BK, M, N, K): ragged in every dimension, several blocks, both chunk widths
    ("64x64_2x2", 32, 70, 72, 40),
    ("64x64_2x2", 64, 33, 136, 72),
    ("128x128_2x4", 32, 130, 24, 48),
    ("128x256_2x4", 32, 17, 264, 16),
    ("256x128_4x2", 64, 40, 16, 80),
    ("64x128_2x2", 32, 9, 130, 96),
]


@pytest.mark.parametrize("kmajor", [False, True], ids=["b_rowmajor", "b_kmajor"])
@pytest.mark.parametrize(("tile", "bk", "m", "n", "k"), CASES)
def test_emulated_kernel_computes_a_matmul(tile, bk, m, n, k, kmajor):
    rng = np.random.default_rng(0)
    a = rng.integers(-4, 5, size=(m, k)).astype(np.float64)  # small integers: exact sums, any order
    b = rng.integers(-4, 5, size=(k, n)).astype(np.float64)
    t = Tile(tile, bk, kmajor, group_m=2)
    out = emulate(t, a, np.ascontiguousarray(b.T) if kmajor else b, m, n, k)
    assert not np.isnan(out).any(), "some output element was never written"
    np.testing.assert_array_equal(out, a @ b)


@pytest.mark.parametrize("cpr", [2, 4, 8, 16, 32])
def test_swizzle_is_a_bijection_and_ldmatrix_is_conflict_free(cpr):
    rows = 64
    offsets = sorted(swz(cpr, r, c) for r in range(rows) for c in range(cpr))
    assert offsets == [8 * i for i in range(rows * cpr)]
    for r0 in range(0, rows, 8):  # one 8x8 matrix: 8 consecutive rows, one logical chunk
        for c in range(cpr):
            groups = {(swz(cpr, r0 + i, c) // 8) % 8 for i in range(8)}  # 16-byte bank group of a 128-byte line
            assert len(groups) == 8, f"cpr={cpr} rows {r0}.. chunk {c}: bank conflict"


@pytest.mark.parametrize("tile", MODULE.SEARCH_SPACE["TILE"])
def test_grouped_order_covers_every_tile_once(tile):
    t = Tile(tile, 32, False, group_m=3)
    for m, n in ((1000, 1023), (4096, 11008), (1, 1), (300, 70)):
        seen = [t.block_origin(blk, m, n) for blk in range(-(-m // t.bm) * -(-n // t.bn))]
        assert len(set(seen)) == len(seen)
        assert {o for o in seen} == {(i * t.bm, j * t.bn) for i in range(-(-m // t.bm)) for j in range(-(-n // t.bn))}


@pytest.mark.parametrize("stages", [2, 3, 4, 5])
@pytest.mark.parametrize("ktiles", [1, 2, 3, 7])
def test_pipeline_schedule(stages, ktiles):
    """One commit group a slice (empty past the end); wait_group<STAGES-2> before reading slice kt."""
    groups = []  # groups[g] = slice loaded by commit group g (None: empty)
    owner = {}  # stage -> slice it holds
    for s in range(stages - 1):
        groups.append(s if s < ktiles else None)
        if s < ktiles:
            owner[s % stages] = s
    for kt in range(ktiles):
        complete = len(groups) - (stages - 2)  # wait_group<STAGES-2>: all but the newest STAGES-2 groups done
        assert kt in groups[:complete], "slice kt may still be in flight when it is read"
        nxt = kt + stages - 1
        if nxt < ktiles:
            assert nxt % stages != kt % stages, "refilling the stage being read"
            assert owner.get(nxt % stages, -1) < kt, "overwriting a slice not yet consumed"
            owner[nxt % stages] = nxt
        groups.append(nxt if nxt < ktiles else None)
        assert owner[kt % stages] == kt


def test_every_search_space_point_fits_shared_memory_and_registers():
    original = dict(MODULE.CONFIG)
    try:
        for tile in MODULE.SEARCH_SPACE["TILE"]:
            for bk in MODULE.SEARCH_SPACE["BK"]:
                for stages in MODULE.SEARCH_SPACE["STAGES"]:
                    MODULE.CONFIG.update(TILE=tile, BK=bk, STAGES=stages)
                    d = MODULE._defines()
                    assert 2 <= d["STAGES"] <= stages
                    assert d["STAGES"] * MODULE._stage_bytes() <= 227 * 1024
                    # sm_86/89 allow 99 KiB a block: the launcher's stages follow the device's limit
                    small = MODULE._defines(99 * 1024)["STAGES"]
                    assert small <= d["STAGES"] and (small == 2 or small * MODULE._stage_bytes() <= 99 * 1024)
                    wtm, wtn = d["BM"] // d["WARPS_M"], d["BN"] // d["WARPS_N"]
                    assert wtm % 16 == 0 and wtn % 16 == 0 and wtm * wtn <= 64 * 64
    finally:
        MODULE.CONFIG.clear()
        MODULE.CONFIG.update(original)


# ---- the launcher (kernel_fn) on CPU tensors, with the kernel replaced by the emulation above ----
def _fake_launch(kernel, grid, block, args, shared_mem=0):
    assert kernel.startswith("matmul_mma_"), kernel
    kmajor = kernel.endswith("_nt")
    out, a, b = args[:3]
    m, n, k, lda, ldb = (v.value for v in args[3:])
    bm, bn, wm, wn = MODULE._tile()
    assert tuple(grid) == (-(-m // bm) * -(-n // bn),) and tuple(block) == (wm * wn * 32,)
    assert shared_mem == MODULE._stages() * MODULE._stage_bytes() <= 227 * 1024
    assert a.data_ptr() % 16 == 0 and b.data_ptr() % 16 == 0 and lda % 8 == 0 and ldb % 8 == 0
    assert out.is_contiguous() and a.dtype == b.dtype == out.dtype
    # What the kernel reads: a[r * lda + c], b[r * ldb + c] from each tensor's own start.
    a_rows = torch.as_strided(a, (m, k), (lda, 1)).double().numpy()
    b_rows = torch.as_strided(b, (n, k) if kmajor else (k, n), (ldb, 1)).double().numpy()
    tile = Tile(MODULE.CONFIG["TILE"], MODULE.CONFIG["BK"], kmajor, MODULE._stages(), MODULE.CONFIG["GROUP_M"])
    out.copy_(torch.from_numpy(emulate(tile, a_rows, b_rows, m, n, k)))


def _layouts(a, b):
    """Operand layouts the harness and models pass: contiguous, b = W.T, rows padded (a slice), a transposed."""
    def pad(t):
        nans = torch.full((t.shape[0], 3), float("nan"), dtype=t.dtype, device=t.device)
        return torch.cat([t, nans], 1)[:, : t.shape[1]]

    yield "contiguous", a, b
    yield "b_transposed", a, b.t().contiguous().t()
    yield "rows_padded", pad(a), pad(b)
    yield "a_transposed", a.t().contiguous().t(), b


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(64, 96, 80), (33, 40, 17), (1, 17, 31), (7, 1, 13), (1, 1, 1), (40, 24, 136)])
def test_kernel_fn_with_the_emulated_kernel(monkeypatch, shape, dtype):
    monkeypatch.setattr(MODULE, "_kernel", lambda name, defines, arch=None: name)
    monkeypatch.setattr(MODULE.nvrtc, "launch", _fake_launch)
    m, k, n = shape
    gen = torch.Generator().manual_seed(0)
    a = torch.randint(-4, 5, (m, k), generator=gen).to(dtype)  # small integers: exact in fp32 and in the output
    b = torch.randint(-4, 5, (k, n), generator=gen).to(dtype)
    expected = (a.double() @ b.double()).to(dtype)
    for name, x, y in _layouts(a, b):
        got = MODULE.kernel_fn(x, y)
        assert torch.equal(got, expected), f"{name} {shape} {dtype}"


# ==== VARIANT "wgmma" (Part 3: TMA + mbarrier ring + wgmma, sm_90a) ===============================================
# The kernel cannot run here either. Its shared-memory addressing is replayed against two independent models:
#   * TMA tiled copy with CU_TENSOR_MAP_SWIZZLE_128B: box element (i, j) (j innermost, 128-byte box rows) is written
#     at byte address A = dst + 128 i + 2 j, moved by the swizzle to A ^ (((A >> 7) & 7) << 4) (16-byte chunk XOR
#     row mod 8, dst 1024-byte aligned); elements outside the tensor arrive as zeros;
#   * wgmma's canonical 128B-swizzle layouts (PTX ISA "Shared Memory Matrix Layout"; CUTLASS make_gmma_desc), in
#     16-bit elements, T = 8 elements = 16 bytes, addresses relative to the descriptor's start address, then the
#     same XOR applied to the absolute address:
#       K-major  ((8, m), (T, 2)) : ((8T, SBO), (1, T))       row mn, col kk -> 128 (mn % 8) + SBO (mn / 8) + 2 kk
#       MN-major ((T, 8, n), (8, k)) : ((1, T, LBO), (8T, SBO)) mn, kk -> 2 (mn % 64) + LBO (mn / 64) + 128 (kk % 8)
#                                                                  + SBO (kk / 8)
#     with start, LBO, SBO decoded from the kernel's 64-bit descriptor (bits 0-13, 16-29, 32-45, all >> 4; swizzle
#     mode bits 62-63 = 1: 128B);
#   * the m64nNk16 accumulator fragment: warp w, lane l, register i -> row 16w + l/4 + 8 ((i/2) % 2),
#     col 8 (i/4) + 2 (l%4) + (i%2).
# If the CUDA formulas (wg_desc arguments, TMA coordinates, stage offsets, epilogue) change, change them here too.
WG_BK = 64


class WgTile:
    def __init__(self, wg_tile: str, kmajor: bool, stages: int = 3, group_m: int = 8, tma_store: bool = False,
                 store_split: int = 1, cluster: int = 1):
        self.bm, self.bn = (int(v) for v in wg_tile.split("x"))
        self.cluster = cluster
        self.kmajor, self.stages, self.group_m, self.tma_store = kmajor, stages, group_m, tma_store
        self.a_bytes, self.b_bytes = self.bm * WG_BK * 2, self.bn * WG_BK * 2
        self.stage_bytes = self.a_bytes + self.b_bytes
        self.split, self.store_cols = store_split, self.bn // store_split
        self.out_bytes = self.bm * self.store_cols * 2 if tma_store else 0

    def cluster_origin(self, ct: int, m: int, n: int) -> tuple[int, int]:
        """grouped_tile<WG_CLUSTER * WG_BM, WG_BN, WG_GROUP>(m, n, ct): the first row and column of cluster tile ct
        (WG_GROUP: GROUP_M block rows make GROUP_M / WG_CLUSTER rows of cluster tiles, at least one)."""
        tiles_m, tiles_n = -(-m // (self.cluster * self.bm)), -(-n // self.bn)
        group = max(self.group_m // self.cluster, 1)
        per_group = group * tiles_n
        first_m = (ct // per_group) * group
        group_rows = min(tiles_m - first_m, group)
        in_group = ct % per_group
        return (first_m + in_group % group_rows) * self.cluster * self.bm, (in_group // group_rows) * self.bn

    def produce(self, smems, rank, base, it, kt, a, b_rows, bm, bn):
        """CTA `rank`'s producer thread: its copies of slice kt of its tile, the block's it-th slice over all its
        tiles (map_a box 64 x 128 into its own shared memory smems[rank]; its 1 / WG_CLUSTER of the B tile -- map_b
        64 x BN/WG_CLUSTER rows (nt) or BN/64/WG_CLUSTER boxes 64 x 64 (nn) -- into every CTA's shared memory at the
        same offset, as the multicast copy writes it)."""
        s = it % self.stages
        a_s = base + s * self.stage_bytes
        b_s = a_s + self.a_bytes
        tma_load(smems[rank], a_s, a, kt * WG_BK, bm, 64, self.bm)
        for smem in smems:
            if self.kmajor:
                rows = self.bn // self.cluster
                tma_load(smem, b_s + rank * (self.b_bytes // self.cluster), b_rows, kt * WG_BK, bn + rank * rows, 64,
                         rows)
            else:
                per_cta = self.bn // 64 // self.cluster
                for j in range(rank * per_cta, (rank + 1) * per_cta):
                    tma_load(smem, b_s + j * 8192, b_rows, bn + 64 * j, kt * WG_BK, 64, 64)

    def consume(self, smem, base, stage, wg, acc):
        """Consumer warpgroup wg (1, 2): the 4 wgmma of the slice in ring stage `stage` with the kernel's descriptors
        (stage 0's, their start-address words advanced by stage * WG_STAGE_BYTES / 16 and the k step's); acc
        [64, BN]."""
        da0 = wg_desc(base + (wg - 1) * 64 * 128, 16, 1024)
        db0 = wg_desc(base + self.a_bytes, 16, 1024) if self.kmajor else wg_desc(base + self.a_bytes, 8192, 1024)
        da_lo, db_lo = da0 & 0xFFFFFFFF, db0 & 0xFFFFFFFF
        da_hi, db_hi = da0 & 0xFFFFFFFF00000000, db0 & 0xFFFFFFFF00000000
        at = stage * (self.stage_bytes >> 4)
        for ks in range(WG_BK // 16):
            da = da_hi | ((da_lo + at + 2 * ks) & 0xFFFFFFFF)
            db = db_hi | ((db_lo + at + (2 if self.kmajor else 128) * ks) & 0xFFFFFFFF)
            assert da == desc_plus(da0, stage * self.stage_bytes + 32 * ks), "the start-address field carried"
            a_op = wgmma_operand(smem, da, 64, mn_major=False)
            b_op = wgmma_operand(smem, db, self.bn, mn_major=not self.kmajor)  # [N, 16]: B transposed
            acc += a_op @ b_op.T


class ConsumerRing:
    """A consumer's ring position as the kernel keeps it (counters, not it % STAGES): the stage of its next K slice,
    the parity of that stage's full-barrier phase, and the stage the slice before read."""

    def __init__(self, stages: int):
        self.stages, self.stage, self.parity, self.prev = stages, 0, 0, 0

    def advance(self) -> None:  # prev = stage; if (++stage == WG_STAGES) { stage = 0; parity ^= 1; }
        self.prev = self.stage
        self.stage += 1
        if self.stage == self.stages:
            self.stage, self.parity = 0, self.parity ^ 1


def accumulator_registers(acc: np.ndarray) -> np.ndarray:
    """regs[warp, lane, i] of the m64nNk16 fragment holding the 64 x N matrix acc (PTX ISA layout)."""
    n = acc.shape[1]
    w, lane, i = np.meshgrid(np.arange(4), np.arange(32), np.arange(n // 2), indexing="ij")
    return acc[16 * w + lane // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (lane % 4) + (i % 2)]


def wg_emulate(t: WgTile, a, b_rows, m, n, k, smem_start: int = 16, grid: int | None = None):
    """Every cluster of the wgmma kernel, in turn; b_rows is b [K,N] (nn) or W [N,K] (nt, b = W.T). grid: the blocks
    launched (default WG_CLUSTER a cluster tile); cluster g (blocks g * WG_CLUSTER + rank) computes cluster tiles g,
    g + grid / WG_CLUSTER, ... on its shared-memory rings, as the kernel's persistent loop does (WG_PERSISTENT)."""
    base = (smem_start + 1023) & ~1023  # the kernel's round-up of the dynamic shared-memory start
    ctiles = -(-m // (t.cluster * t.bm)) * -(-n // t.bn)
    clusters = ctiles if grid is None else grid // t.cluster
    assert grid is None or grid % t.cluster == 0, "the grid is whole clusters"
    out = np.full((m, n), np.nan)
    ktiles = -(-k // WG_BK)
    for first in range(clusters):
        # each block its own shared memory: the ring, then the output tile
        smems = [np.full((base + t.stages * t.stage_bytes + t.out_bytes) // 2, np.nan) for _ in range(t.cluster)]
        it = 0
        rings = {(rank, wg): ConsumerRing(t.stages) for rank in range(t.cluster) for wg in (1, 2)}
        for ct in range(first, ctiles, clusters):
            _wg_emulate_tile(t, smems, base, it, rings, a, b_rows, m, n, ktiles, ct, out)
            it += ktiles
    return out


def _wg_emulate_tile(t: WgTile, smems, base, it, rings, a, b_rows, m, n, ktiles, ct, out):
    row0, bn = t.cluster_origin(ct, m, n)
    acc = {(rank, wg): np.zeros((64, t.bn)) for rank in range(t.cluster) for wg in (1, 2)}
    for kt in range(ktiles):
        for rank in range(t.cluster):  # every CTA's copies land before any consumer reads (the full barrier)
            t.produce(smems, rank, base, it + kt, kt, a, b_rows, row0 + rank * t.bm, bn)
        for rank in range(t.cluster):
            for wg in (1, 2):
                ring = rings[rank, wg]
                assert ring.stage == (it + kt) % t.stages  # the counters follow the producer's it % STAGES
                t.consume(smems[rank], base, ring.stage, wg, acc[rank, wg])
                ring.advance()
    for rank in range(t.cluster):
        _wg_epilogue(t, smems[rank], base, {wg: acc[rank, wg] for wg in (1, 2)}, row0 + rank * t.bm, bn, m, n, out)


def _wg_epilogue(t: WgTile, smem, base, acc, bm, bn, m, n, out):
    if t.tma_store:
        _wg_store_tile_tma(t, smem, base + t.stages * t.stage_bytes, acc, bm, bn, out)
        return
    for wg in (1, 2):  # epilogue, as in the kernel
        regs = accumulator_registers(acc[wg])
        for warp in range(4):
            for lane in range(32):
                row0 = bm + (wg - 1) * 64 + warp * 16 + (lane >> 2)
                for j in range(t.bn // 8):
                    col = bn + 8 * j + 2 * (lane & 3)
                    for h in range(2):
                        row = row0 + 8 * h
                        if row >= m or col >= n:
                            continue
                        assert np.isnan(out[row, col]), "an output element is written twice"
                        out[row, col] = regs[warp, lane, 4 * j + 2 * h]
                        if col + 1 < n:
                            out[row, col + 1] = regs[warp, lane, 4 * j + 2 * h + 1]


def _wg_store_tile_tma(t: WgTile, smem, out_buf, acc, bm, bn, out):
    """store_tile_tma: per pass, each thread's pairs of the pass's WG_STORE_COLS columns into the shared buffer at the
    kernel's hand-swizzled addresses, then the TMA stores of its 64 x 64 boxes a warpgroup (modelled with the
    hardware's swizzle, bounds-clipped)."""
    before = out.copy()
    for pass_ in range(t.split):
        smem[out_buf // 2:(out_buf + t.out_bytes) // 2] = np.nan  # a pass may not rely on the last one's values
        written = np.zeros(t.out_bytes // 2, dtype=int)
        for wg in (1, 2):
            buf = out_buf + (wg - 1) * (t.out_bytes // 2)
            regs = accumulator_registers(acc[wg])
            for warp in range(4):
                for lane in range(32):
                    r = warp * 16 + (lane >> 2)
                    for jj in range(t.store_cols // 8):
                        j = pass_ * (t.store_cols // 8) + jj
                        chunk = ((jj % 8) ^ (lane >> 2)) * 16 + 4 * (lane & 3)
                        for h in range(2):
                            addr = buf + (jj // 8) * 8192 + (r + 8 * h) * 128 + chunk
                            for e in range(2):
                                smem[(addr + 2 * e) // 2] = regs[warp, lane, 4 * j + 2 * h + e]
                                written[(addr + 2 * e - out_buf) // 2] += 1
        assert (written == 1).all(), "the warpgroups' stores must cover the shared buffer exactly once a pass"
        for wg in (1, 2):
            buf = out_buf + (wg - 1) * (t.out_bytes // 2)
            for b in range(t.store_cols // 64):
                tma_store(smem, buf + b * 8192, out, bn + pass_ * t.store_cols + 64 * b, bm + (wg - 1) * 64, 64, 64)
    changed = ~np.isnan(out) & np.isnan(before)
    assert not (~np.isnan(before) & (out != before)).any(), "an output element is written twice"
    assert changed.sum() == max(0, min(t.bm, out.shape[0] - bm)) * min(t.bn, out.shape[1] - bn)


WG_CASES = [  # (WG_TILE, M, N, K): ragged in every dimension, several blocks and K slices
    ("128x256", 130, 264, 136),
    ("128x128", 200, 136, 72),
    ("128x256", 1, 31, 17),
    ("128x128", 129, 65, 129),
    ("128x256", 64, 80, 96),
]


@pytest.mark.parametrize(("tma_store", "split"), [(False, 1), (True, 1), (True, 2)],
                         ids=["direct_store", "tma_store", "tma_store_split2"])
@pytest.mark.parametrize(("cluster", "grid"), [(1, None), (1, 1), (1, 2), (2, None), (2, 2), (2, 4)],
                         ids=["block_a_tile", "persistent_1", "persistent_2", "cluster2", "cluster2_persistent_1",
                              "cluster2_persistent_2"])
@pytest.mark.parametrize("kmajor", [False, True], ids=["b_rowmajor_nn", "b_kmajor_nt"])
@pytest.mark.parametrize(("wg_tile", "m", "n", "k"), WG_CASES)
def test_wgmma_emulated_kernel_computes_a_matmul(wg_tile, m, n, k, kmajor, grid, tma_store, split, cluster):
    rng = np.random.default_rng(1)
    a = rng.integers(-4, 5, size=(m, k)).astype(np.float64)
    b = rng.integers(-4, 5, size=(k, n)).astype(np.float64)
    # group_m 2 x cluster: groups of two cluster rows (WG_GROUP 2) whether clustered or not
    t = WgTile(wg_tile, kmajor, stages=3, group_m=2 * cluster, tma_store=tma_store, store_split=split, cluster=cluster)
    out = wg_emulate(t, a, np.ascontiguousarray(b.T) if kmajor else b, m, n, k, grid=grid)
    assert not np.isnan(out).any(), "some output element was never written"
    np.testing.assert_array_equal(out, a @ b)


def test_wgmma_descriptors_follow_the_canonical_layouts_element_by_element():
    """One TMA tile per operand kind, filled with distinct values; every (mn, k) element the descriptor of each
    K step addresses must be the intended matrix element (catches a wrong LBO, SBO, K step or swizzle mode)."""
    smem = np.full(4 * 65536, np.nan)
    vals = np.arange(256 * 64, dtype=np.float64).reshape(256, 64)  # [rows][k] (K-major) tile of 128-byte rows
    tma_load(smem, 8192, vals, 0, 0, 64, 256)
    for ks in range(4):
        got = wgmma_operand(smem, wg_desc(8192 + 32 * ks, 16, 1024), 256, mn_major=False)
        np.testing.assert_array_equal(got, vals[:, 16 * ks:16 * ks + 16])
    kn = np.arange(64 * 256, dtype=np.float64).reshape(64, 256)  # b [k][n]: 4 boxes of 64 n x 64 k
    for j in range(4):
        tma_load(smem, 65536 + 8192 * j, kn, 64 * j, 0, 64, 64)
    for ks in range(4):
        got = wgmma_operand(smem, wg_desc(65536 + 2048 * ks, 8192, 1024), 256, mn_major=True)
        np.testing.assert_array_equal(got, kn[16 * ks:16 * ks + 16].T)
    # The bit packing: fields land where the PTX ISA puts them.
    d = wg_desc(0x3FFF0, 8192, 1024)
    assert d & 0x3FFF == 0x3FFF and (d >> 16) & 0x3FFF == 512 and (d >> 32) & 0x3FFF == 64 and d >> 62 == 1
    assert (d >> 46) & 0xFFFF == 0  # bits 46-61 clear: base offset 0, nothing between SBO and the swizzle mode


@pytest.mark.parametrize("cluster", [1, 2])
@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize(("ktiles", "tiles"), [(1, 1), (2, 1), (5, 1), (9, 1), (1, 4), (2, 3), (5, 3)])
@pytest.mark.parametrize("seed", range(3))
def test_wgmma_mbarrier_ring_under_random_interleavings(stages, ktiles, tiles, seed, cluster):
    """The producers and 8 consumer warps of each CTA of a cluster step in random order with the kernel's parities.
    full[c][s] completes when CTA c's producer has armed it (count 1) and every producer's copy of the slice has
    landed in c (multicast: the B parts of all CTAs, tx bytes); empty[c][s] counts 8 x cluster arrivals (every
    consumer warp frees a stage in every CTA, since each producer writes into all of them). A consumer must read slice
    it from stage it % S with every part in place, no producer may write a stage any CTA's wgmma may still read, and
    nothing deadlocks. tiles: the tiles one block computes (the persistent loop): `it` runs on over them, and each
    tile's last slice is released after its wgmma.wait_group 0, before the epilogue."""
    total = ktiles * tiles
    ctas = range(cluster)
    rng = np.random.default_rng(seed)
    phase = {(c, kind, s): 0 for c in ctas for kind in ("full", "empty") for s in range(stages)}
    pending = {bar: set() for bar in phase}  # the contributions of the current phase so far
    need = {(c, kind, s): ({"armed"} | {("copy", p) for p in ctas}) if kind == "full"
            else {(d, w) for d in ctas for w in range(8)} for (c, kind, s) in phase}
    holds = {(c, s): {} for c in ctas for s in range(stages)}  # CTA c's stage s: producer p's part -> slice
    reading = {(c, s): set() for c in ctas for s in range(stages)}  # consumer warps whose wgmma may still read it

    def arrive(bar, what):
        assert what not in pending[bar], f"{what} arrives twice on {bar} in one phase"
        pending[bar].add(what)
        if pending[bar] == need[bar]:
            pending[bar], phase[bar] = set(), phase[bar] + 1

    def done(bar, parity):  # try_wait.parity P succeeds while the current (incomplete) phase's parity is not P
        return phase[bar] % 2 != parity

    def free(c, w, s):  # lane 0 of warp w of CTA c frees stage s in every CTA (mbar_arrive + mbar_arrive_cluster)
        reading[c, s].discard(w)
        for d in ctas:
            arrive((d, "empty", s), (c, w))

    prod = [0] * cluster
    cons = {(c, w): 0 for c in ctas for w in range(8)}  # next slice each consumer warp waits for
    rings = {cw: ConsumerRing(stages) for cw in cons}  # ... and its stage / parity / previous stage counters
    released = dict.fromkeys(cons, 0)
    steps = 0
    while min(prod) < total or min(cons.values()) < total:
        steps += 1
        assert steps < 40000, "deadlock"
        actor = int(rng.integers(0, 9 * cluster))
        c, w = divmod(actor, 9)
        if w == 8:  # CTA c's producer
            it = prod[c]
            if it < total:
                s = it % stages
                if it < stages or done((c, "empty", s), ((it // stages) - 1) & 1):
                    assert it < stages or phase[c, "empty", s] == it // stages, "parity wait is ambiguous"
                    arrive((c, "full", s), "armed")
                    for d in ctas:  # its A part (own CTA) and its B part (every CTA) land
                        assert not reading[d, s], "a producer overwrites a stage a wgmma may still read"
                        holds[d, s][c] = it
                        arrive((d, "full", s), ("copy", c))
                    prod[c] += 1
            continue
        it = cons[c, w]
        if it >= total:
            continue
        ring = rings[c, w]
        s = ring.stage
        if not done((c, "full", s), ring.parity):
            continue
        assert holds[c, s] == dict.fromkeys(ctas, it), "a consumer reads a stage not wholly holding its slice"
        assert phase[c, "full", s] == it // stages + 1, "parity wait is ambiguous (barrier two phases ahead)"
        reading[c, s].add(w)
        # wgmma.wait_group 1: the previous slice's wgmma have completed; lane 0 frees its stage (not across tiles:
        # the previous tile's last slice was freed after its wait_group 0)
        if it % ktiles > 0:
            free(c, w, ring.prev)
            released[c, w] += 1
        ring.advance()
        if it % ktiles == ktiles - 1:  # the tile's last slice: wait_group 0, free it (now `prev`), epilogue
            free(c, w, ring.prev)
            released[c, w] += 1
        cons[c, w] += 1
    assert prod == [total] * cluster and set(cons.values()) == {total} and set(released.values()) == {total}


def test_every_wgmma_search_space_point_fits_shared_memory():
    original = dict(MODULE.CONFIG)
    try:
        for wg_tile, stages, tma_store, split in itertools.product(
                MODULE.SEARCH_SPACE["WG_TILE"], MODULE.SEARCH_SPACE["WG_STAGES"], MODULE.SEARCH_SPACE["WG_TMA_STORE"],
                MODULE.SEARCH_SPACE["WG_STORE_SPLIT"]):
            MODULE.CONFIG.update(WG_TILE=wg_tile, WG_STAGES=stages, WG_TMA_STORE=tma_store, WG_STORE_SPLIT=split)
            d = MODULE._defines()
            bm, bn = MODULE._wg_tile()
            out_bytes = bm * bn * 2 // split if tma_store else 0
            assert bn // split % 64 == 0, "a pass stores whole 64-column boxes"
            assert 2 <= d["WG_STAGES"] <= stages and (d["WG_BM"], d["WG_BN"]) == (bm, bn)
            assert d["WG_TMA_STORE"] == int(tma_store) and d["WG_STORE_SPLIT"] == split
            assert MODULE._wg_shared() == d["WG_STAGES"] * MODULE._wg_stage_bytes() + out_bytes + 2048 <= 227 * 1024
            # the output tile and the barriers (16 bytes a stage) fit the slack left after the 1 KiB round-up
            assert 1023 + d["WG_STAGES"] * MODULE._wg_stage_bytes() + out_bytes + 16 * d["WG_STAGES"] <= \
                MODULE._wg_shared()
    finally:
        MODULE.CONFIG.clear()
        MODULE.CONFIG.update(original)


# ---- the wgmma launcher on CPU tensors: tensor maps recorded, the kernel replaced by the emulation above ----
def _fake_wgmma_launch(kernel, grid, block, args, shared_mem=0):
    assert kernel.startswith("matmul_wgmma_"), kernel
    kmajor = kernel.split("@")[0].endswith("_nt")
    out, map_a, map_b, map_out = args[:4]
    m, n, k = (v.value for v in args[4:])
    bm, bn = MODULE._wg_tile()
    cluster = MODULE.CONFIG["WG_CLUSTER"] if k >= MODULE.CONFIG["WG_CLUSTER_MIN_K"] else 1
    assert kernel.endswith(f"@cluster{cluster}"), kernel  # the build of this call's cluster size
    ctiles = -(-m // (cluster * bm)) * -(-n // bn)
    clusters = min(ctiles, FAKE_SMS // cluster) if MODULE.CONFIG["WG_PERSISTENT"] else ctiles
    assert tuple(grid) == (clusters * cluster,) and tuple(block) == (384,)
    assert shared_mem == MODULE._wg_shared() <= 227 * 1024
    assert map_a.box == (bm, 64) and map_a.rows.shape == (m, k) and map_a.swizzle == map_b.swizzle == 128
    assert map_b.box == ((bn // cluster, 64) if kmajor else (64, 64))
    assert map_a.l2_promotion == map_b.l2_promotion == MODULE.CONFIG["WG_L2_PROMOTION"]
    assert map_b.rows.shape == ((n, k) if kmajor else (k, n))
    # TMA addresses out's rows when they are 16-byte multiples, or when there is one row (its stride is never used);
    # else no map: the kernel stores from registers
    tma_store = MODULE.CONFIG["WG_TMA_STORE"] and (n % 8 == 0 or m == 1)
    assert (map_out is not None) == tma_store
    if tma_store:
        assert map_out.box == (64, 64) and map_out.swizzle == 128 and map_out.rows.shape == (m, n)
    tile = WgTile(MODULE.CONFIG["WG_TILE"], kmajor, MODULE._wg_stages(), MODULE.CONFIG["GROUP_M"], tma_store,
                  MODULE.CONFIG["WG_STORE_SPLIT"], cluster)
    out.copy_(torch.from_numpy(wg_emulate(tile, map_a.rows, map_b.rows, m, n, k, grid=grid[0])))


def _fake_kernel(name, defines, arch=None):
    """The launcher's build request as "name@clusterN" (N: the WG_CLUSTER define that build gets)."""
    assert arch == "sm_90a", arch
    return f"{name}@cluster{defines['WG_CLUSTER']}"


FAKE_SMS = 2  # the persistent launch's SM count on the CPU: fewer blocks than tiles in (130, 72, 264) at 128x128


@pytest.mark.parametrize(("persistent", "tma_store", "split", "cluster"),
                         [(False, False, 1, 1), (True, False, 1, 1), (True, True, 1, 1), (False, True, 2, 1),
                          (True, True, 2, 2), (False, False, 1, 2)],
                         ids=["block_a_tile", "persistent", "persistent_tma_store", "tma_store_split2",
                              "persistent_tma_store_split2_cluster2", "cluster2"])
@pytest.mark.parametrize("wg_tile", ["128x256", "128x128"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(64, 96, 80), (33, 40, 17), (1, 17, 31), (7, 1, 13), (130, 72, 264), (300, 520, 72),
                                   (520, 72, 300)])
def test_wgmma_kernel_fn_with_the_emulated_kernel(monkeypatch, shape, dtype, wg_tile, persistent, tma_store, split,
                                                  cluster):
    monkeypatch.setitem(MODULE.CONFIG, "VARIANT", "wgmma")
    monkeypatch.setitem(MODULE.CONFIG, "WG_TILE", wg_tile)
    monkeypatch.setitem(MODULE.CONFIG, "WG_PERSISTENT", persistent)
    monkeypatch.setitem(MODULE.CONFIG, "WG_TMA_STORE", tma_store)
    monkeypatch.setitem(MODULE.CONFIG, "WG_STORE_SPLIT", split)
    monkeypatch.setitem(MODULE.CONFIG, "WG_CLUSTER", cluster)
    monkeypatch.setitem(MODULE.CONFIG, "WG_CLUSTER_MIN_K", 0)  # clustered at every K when cluster is 2
    monkeypatch.setattr(MODULE, "_sm_count", lambda device: FAKE_SMS)
    monkeypatch.setattr(MODULE, "_wgmma_arch", lambda device: "sm_90a")
    monkeypatch.setattr(MODULE, "_kernel", _fake_kernel)
    monkeypatch.setattr(MODULE.nvrtc, "tensor_map", FakeTensorMap)
    monkeypatch.setattr(MODULE.nvrtc, "tensor_maps_unusable", lambda: None)  # no bindings needed
    monkeypatch.setattr(MODULE.nvrtc, "launch", _fake_wgmma_launch)
    m, k, n = shape
    gen = torch.Generator().manual_seed(0)
    a = torch.randint(-4, 5, (m, k), generator=gen).to(dtype)
    b = torch.randint(-4, 5, (k, n), generator=gen).to(dtype)
    expected = (a.double() @ b.double()).to(dtype)
    for name, x, y in _layouts(a, b):
        got = MODULE.kernel_fn(x, y)
        assert torch.equal(got, expected), f"{name} {shape} {dtype}"


@pytest.mark.parametrize("shape", [(130, 72, 264), (300, 520, 72), (64, 256, 96), (64, 255, 96)])
@pytest.mark.parametrize(("operands", "layout"), [("contiguous", "nn"), ("b_transposed", "nt")])
def test_wgmma_cluster_only_from_wg_cluster_min_k(monkeypatch, shape, operands, layout):
    """WG_CLUSTER 2 with WG_CLUSTER_MIN_K 256: K >= 256 launches the 2-CTA build (B boxes halved for "nt", a grid of
    cluster pairs), K < 256 the build without a cluster; both exact (_fake_wgmma_launch checks the launch)."""
    for key, value in {"VARIANT": "wgmma", "WG_CLUSTER": 2, "WG_CLUSTER_MIN_K": 256, "WG_PERSISTENT": True}.items():
        monkeypatch.setitem(MODULE.CONFIG, key, value)
    monkeypatch.setattr(MODULE, "_sm_count", lambda device: FAKE_SMS)
    monkeypatch.setattr(MODULE, "_wgmma_arch", lambda device: "sm_90a")
    monkeypatch.setattr(MODULE, "_kernel", _fake_kernel)
    monkeypatch.setattr(MODULE.nvrtc, "tensor_map", FakeTensorMap)
    monkeypatch.setattr(MODULE.nvrtc, "tensor_maps_unusable", lambda: None)
    launched = []
    monkeypatch.setattr(MODULE.nvrtc, "launch", lambda kernel, **kw: (launched.append(kernel),
                                                                      _fake_wgmma_launch(kernel, **kw)))
    m, k, n = shape
    gen = torch.Generator().manual_seed(0)
    a = torch.randint(-4, 5, (m, k), generator=gen).to(torch.bfloat16)
    b = torch.randint(-4, 5, (k, n), generator=gen).to(torch.bfloat16)
    x, y = {name: (x, y) for name, x, y in _layouts(a, b)}[operands]
    assert torch.equal(MODULE.kernel_fn(x, y), (a.double() @ b.double()).to(torch.bfloat16))
    assert launched == [f"matmul_wgmma_bf16_{layout}@cluster{2 if k >= 256 else 1}"]


def test_cuda_builds_hold_the_unclustered_kernels_when_wg_cluster_min_k_is_set(monkeypatch):
    monkeypatch.setitem(MODULE.CONFIG, "WG_CLUSTER", 2)
    monkeypatch.setitem(MODULE.CONFIG, "WG_CLUSTER_MIN_K", 8192)
    clusters = sorted(defines["WG_CLUSTER"] for _, defines, names, *arch in MODULE.cuda_builds()
                      if arch == [MODULE.nvrtc.WGMMA_ARCH])
    assert clusters == [1, 2]
    monkeypatch.setitem(MODULE.CONFIG, "WG_CLUSTER_MIN_K", 0)  # every K clustered: one sm_90a build
    assert [d["WG_CLUSTER"] for _, d, _, *arch in MODULE.cuda_builds() if arch == [MODULE.nvrtc.WGMMA_ARCH]] == [2]


@pytest.mark.parametrize("promotion", MODULE.SEARCH_SPACE["WG_L2_PROMOTION"])
def test_wgmma_maps_carry_the_configured_l2_promotion(monkeypatch, promotion):
    monkeypatch.setitem(MODULE.CONFIG, "VARIANT", "wgmma")
    monkeypatch.setitem(MODULE.CONFIG, "WG_L2_PROMOTION", promotion)
    monkeypatch.setattr(MODULE, "_sm_count", lambda device: FAKE_SMS)
    monkeypatch.setattr(MODULE, "_wgmma_arch", lambda device: "sm_90a")
    monkeypatch.setattr(MODULE, "_kernel", _fake_kernel)
    monkeypatch.setattr(MODULE.nvrtc, "tensor_map", FakeTensorMap)
    monkeypatch.setattr(MODULE.nvrtc, "tensor_maps_unusable", lambda: None)
    monkeypatch.setattr(MODULE.nvrtc, "launch", _fake_wgmma_launch)  # asserts the maps' promotion
    a = torch.randint(-4, 5, (40, 24), generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    b = torch.randint(-4, 5, (24, 136), generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    assert torch.equal(MODULE.kernel_fn(a, b), (a.double() @ b.double()).to(torch.bfloat16))


# The emulator above restates the kernel's index formulas; each must still be the kernel's own text (a changed formula
# in CUDA_SOURCE fails here until the emulator follows it).
KERNEL_FORMULAS = [
    "((jj % 8) ^ (lane >> 2)) * 16 + 4 * (lane & 3)",  # store_tile_tma: swizzled 16-byte chunk of a pair
    "buf + (jj / 8) * 8192 + (r + 8 * h) * 128 + chunk",  # ... in its 64-column box
    "col0 + pass * WG_STORE_COLS + 64 * b",  # the TMA store's column
    "mbar_wait(bars + 8 * stage, parity)",  # consumer: full[stage], its counters (ConsumerRing)
    "prev = stage;\n            if (++stage == WG_STAGES) {\n                stage = 0;\n                parity ^= 1;",
    "unsigned stage = 0, parity = 0, prev = 0;",
    "mbar_wait(bars + 8 * (WG_STAGES + s), ((it / WG_STAGES) - 1) & 1)",  # producer: empty[s]
    "if (kt > 0) release(prev);",  # free the previous slice (not across tiles) ...
    "wg_wait<0>();\n        wg_fence_acc(acc);\n        // The tile's last slice is read",  # ... and the last
    "release(prev);\n\n        if (WG_TMA_STORE",
    "origin.y + rank * (WG_BN / 2), 3)",  # nt: this CTA's half of B, multicast to both
    "const int j = rank * (WG_BN / 128) + jj;",  # nn: this CTA's 64-column blocks of B
    "for (int ct = first; ct < ctiles; ct += step)",  # the persistent walk over cluster tiles
    "WG_GROUP = GROUP_M / WG_CLUSTER > 0 ? GROUP_M / WG_CLUSTER : 1;",  # ... in groups of GROUP_M block rows
    "origin.x += rank * WG_BM;",
    "wg_desc(base + (WG - 1) * 64 * 128, 16, 1024)",  # stage 0's A descriptor of warpgroup WG
    "B_KMAJOR ? wg_desc(base + WG_A_BYTES, 16, 1024)\n" + " " * 44 + ": wg_desc(base + WG_A_BYTES, 8192, 1024)",
    "const unsigned at = stage * (WG_STAGE_BYTES >> 4);",  # WgTile.consume's descriptor words
    "da_hi | (da_lo + at + 2 * ks)",
    "db_hi | (db_lo + at + (B_KMAJOR ? 2 : 128) * ks)",
    "opaque((unsigned)da0), db_lo = opaque((unsigned)db0)",
    "da_hi = da0 & 0xFFFFFFFF00000000ull, db_hi = db0 & 0xFFFFFFFF00000000ull",
    "return (d & 0xFFFFFFFF00000000ull) | (unsigned)((unsigned)d + (bytes >> 4));",  # nvrtc.PRELUDE's desc_plus
]


@pytest.mark.parametrize("formula", KERNEL_FORMULAS)
def test_the_emulated_formulas_are_the_kernels(formula):
    assert formula in MODULE.CUDA_SOURCE, f"CUDA_SOURCE no longer has: {formula}"


def test_wgmma_falls_back_to_mma_off_sm90_and_without_tensor_maps(monkeypatch):
    launched = []
    monkeypatch.setitem(MODULE.CONFIG, "VARIANT", "wgmma")
    monkeypatch.setattr(MODULE, "_kernel", lambda name, defines, arch=None: name)
    monkeypatch.setattr(MODULE.nvrtc, "launch", lambda kernel, **kw: launched.append(kernel))
    a = torch.ones(16, 16, dtype=torch.bfloat16)
    MODULE.kernel_fn(a, a)  # a CPU tensor: _wgmma_arch is None
    assert launched == ["matmul_mma_bf16_nn"]

    def refuse(t, box, swizzle=128, l2_promotion=256):
        raise MODULE.nvrtc.TensorMapError("cuda.bindings is not installed")

    monkeypatch.setattr(MODULE, "_wgmma_arch", lambda device: "sm_90a")
    monkeypatch.setattr(MODULE.nvrtc, "tensor_map", refuse)
    monkeypatch.setattr(MODULE.nvrtc, "tensor_maps_unusable", lambda: None)  # no bindings needed
    with pytest.warns(RuntimeWarning, match="falls back"):
        MODULE.kernel_fn(a, a)
    assert launched[-1] == "matmul_mma_bf16_nn"
    # Known unusable up front (no bindings, graph capture): not even a map is asked for.
    monkeypatch.setattr(MODULE.nvrtc, "tensor_maps_unusable", lambda: "no tensor maps during CUDA graph capture")
    monkeypatch.setattr(MODULE.nvrtc, "tensor_map", lambda *a, **k: pytest.fail("tensor_map called"))
    with pytest.warns(RuntimeWarning, match="graph capture"):
        MODULE.kernel_fn(a, a)
    assert launched[-1] == "matmul_mma_bf16_nn"


# ---- what nvcc makes of Part 3 for sm_90a (the build kernel_fn launches on the H200) ----
CUOBJDUMP = Path(cuobjdump() or "/nonexistent/cuobjdump")


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
@pytest.mark.parametrize(("tma_store", "split", "cluster"), [(False, 1, 1), (True, 1, 1), (True, 2, 1), (True, 2, 2)],
                         ids=["direct_store", "tma_store", "tma_store_split2", "tma_store_split2_cluster2"])
@pytest.mark.parametrize("wg_tile", ["128x256", "128x128"])
def test_wgmma_build_for_sm90a_uses_hgmma_and_tma_without_spills(tmp_path, wg_tile, tma_store, split, cluster):
    from autokernel_ci import nvrtc

    source, defines, names, arch = hopper_build(MODULE, WG_TILE=wg_tile, WG_TMA_STORE=tma_store,
                                                WG_STORE_SPLIT=split, WG_CLUSTER=cluster)
    assert arch == "sm_90a"
    cubin = tmp_path / "matmul.cubin"
    result = nvrtc.compile_check(source, arch, defines=defines, source_name="matmul.cu", ptxas_verbose=True,
                                 keep_cubin=cubin)
    assert set(names) <= set(result.kernels)
    log = result.log.splitlines()
    for name in (n for n in names if n.startswith("matmul_wgmma_")):
        at = next(i for i, line in enumerate(log) if f"Function properties for {name}" in line)
        assert "0 bytes spill stores, 0 bytes spill loads" in log[at + 1], log[at + 1]
        assert_registers_cover_setmaxnreg(result.log, name)
    assert "wgmma" not in result.log.lower().replace("matmul_wgmma", ""), "ptxas warned about wgmma (serialised?)"
    if not CUOBJDUMP.is_file():
        pytest.skip("cuobjdump not found")
    sass = subprocess.run([str(CUOBJDUMP), "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout
    for name in ("matmul_wgmma_bf16_nn", "matmul_wgmma_f16_nt"):
        body = sass.split(f"Function : {name}")[1].split("Function :")[0]
        hgmma = f"HGMMA.64x{wg_tile.split('x')[1]}x16.F32"  # fp16 inputs carry no suffix, bf16 ".BF16"
        assert (hgmma + ".BF16" in body) if "bf16" in name else (hgmma + " " in body)
        assert ("tnspB" in body) == name.endswith("_nn"), "N-major B is read through the transpose bit only"
        assert "UTMALDG.2D" in body and "USETMAXREG" in body and "SYNCS.PHASECHK" in body
        assert ("UTMASTG.2D" in body) == tma_store, "the epilogue's TMA store is compiled in exactly when asked for"
        # fence.proxy.tensormap + prefetch.tensormap: 2 per map before first use (map_a, map_b; map_out's by the
        # storing thread, in each consumer warpgroup's copy of the consumer)
        assert body.count("UTMACCTL") == (8 if tma_store else 4), "every tensor map is acquired before use"
        assert ("UTMALDG.2D.MULTICAST" in body) == (cluster > 1), "B is multicast exactly in a cluster"
        # No memory barrier in the mainloop: a cluster-scope release on the remote stage arrival compiled to
        # MEMBAR.ALL.GPU there and made the clustered kernel 45% slower on the H200 (ncu: membar stalls).
        mainloop = body[body.index("HGMMA"):body.index("WARPGROUP.DEPBAR.LE gsb0, 0x0")]
        assert "MEMBAR" not in mainloop and ("SYNCS.ARRIVE.TRANS64.RED" in mainloop) == (cluster > 1)


# ---- on the GPU: the clustered and the unclustered wgmma builds at odd edges (the default clusters only from
# WG_CLUSTER_MIN_K = 8192, which the spec's small sets never reach; K = 8200 below crosses it) ----
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("config", [{"WG_CLUSTER_MIN_K": 0}, {"WG_CLUSTER": 1}, {}],
                         ids=["clustered", "unclustered", "default"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(300, 520, 72), (520, 257, 1000), (129, 8200, 136), (4000, 1024, 777)])
def test_wgmma_clusters_on_gpu(config, dtype, shape):
    from test_cuda_starters import _import

    from autokernel_ci import kernelfile
    from autokernel_ci.paths import starter_kernel

    kf = kernelfile.load(starter_kernel("matmul", "cuda"))
    module = _import("matmul", kf.with_config({**kf.config, **config}).source)
    m, k, n = shape
    gen = torch.Generator(device="cuda").manual_seed(5)
    # small integers: fp32 accumulation is exact (|sums| < 2^24), so the result must equal the rounded exact product
    a = torch.randint(-4, 5, (m, k), device="cuda", generator=gen).to(dtype)
    b = torch.randint(-4, 5, (k, n), device="cuda", generator=gen).to(dtype)
    expected = (a.double() @ b.double()).to(dtype)
    for name, x, y in _layouts(a, b):
        got = module.kernel_fn(x, y)
        torch.cuda.synchronize()
        assert torch.equal(got, expected), f"{name} {shape} {dtype} {config}"


def test_the_remembered_defines_follow_config_changed_in_place(monkeypatch):
    """_build is kept by CONFIG's items (8 us of parsing and shared-memory arithmetic a call on the CPU): a CONFIG
    edited in place, as the tests and the search agent's in-process points do, must still get its own defines and
    launch sizes."""
    before, build = MODULE._defines(), MODULE._build()
    assert MODULE._defines() is before and MODULE._build() is build  # kept
    monkeypatch.setitem(MODULE.CONFIG, "WG_TILE", "128x128")
    monkeypatch.setitem(MODULE.CONFIG, "TILE", "64x128_2x2")
    monkeypatch.setitem(MODULE.CONFIG, "GROUP_M", MODULE.CONFIG["GROUP_M"] + 1)
    after = MODULE._defines()
    assert (after["WG_BN"], after["GROUP_M"]) == (128, before["GROUP_M"] + 1) and before["WG_BN"] != 128
    _, tile, mma_shared, wg_tile, wg_shared = MODULE._build()
    assert (wg_tile, tile) == ((128, 128), (64, 128, 2, 2)) != (build[3], build[1])
    assert (wg_shared, mma_shared) == (MODULE._wg_shared(), MODULE._stages() * MODULE._stage_bytes())
    assert wg_shared < build[4]  # a 128x128 tile's smaller stages and output buffer
    assert MODULE._defines(cluster=1)["WG_CLUSTER"] == 1
    assert MODULE._defines()["WG_CLUSTER"] == MODULE.CONFIG["WG_CLUSTER"]
    monkeypatch.undo()
    assert MODULE._defines() is before
