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

import importlib.util

import numpy as np
import pytest
import torch

from autokernel_ci.paths import starter_kernel


def _module():
    spec = importlib.util.spec_from_file_location("_cuda_matmul_layout", starter_kernel("matmul", "cuda"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MODULE = _module()
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
    pad = lambda t: torch.cat([t, torch.full((t.shape[0], 3), float("nan"), dtype=t.dtype)], 1)[:, : t.shape[1]]
    yield "contiguous", a, b
    yield "b_transposed", a, b.t().contiguous().t()
    yield "rows_padded", pad(a), pad(b)
    yield "a_transposed", a.t().contiguous().t(), b


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(64, 96, 80), (33, 40, 17), (1, 17, 31), (7, 1, 13), (1, 1, 1), (40, 24, 136)])
def test_kernel_fn_with_the_emulated_kernel(monkeypatch, shape, dtype):
    monkeypatch.setattr(MODULE, "_kernel", lambda name, limit=None: name)
    monkeypatch.setattr(MODULE.nvrtc, "launch", _fake_launch)
    m, k, n = shape
    gen = torch.Generator().manual_seed(0)
    a = torch.randint(-4, 5, (m, k), generator=gen).to(dtype)  # small integers: exact in fp32 and in the output
    b = torch.randint(-4, 5, (k, n), generator=gen).to(dtype)
    expected = (a.double() @ b.double()).to(dtype)
    for name, x, y in _layouts(a, b):
        got = MODULE.kernel_fn(x, y)
        assert torch.equal(got, expected), f"{name} {shape} {dtype}"
