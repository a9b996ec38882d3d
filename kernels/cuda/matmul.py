"""Matmul a[M,K] @ b[K,N], CUDA C++ (NVRTC): Hopper TMA + wgmma for fp16/bf16, cp.async + mma.sync elsewhere.

fp16 / bf16 (VARIANT "mma"): each block computes a BM x BN output tile (default 128 x 256) with
WARPS_M x WARPS_N warps (2 x 4: warp tile 64 x 64 = 4 x 8 mma.m16n8k16 fragments, fp32 accumulators).
K is walked in BK-deep slices (32) through a STAGES-deep ring (4) in dynamic shared memory, filled by
16-byte cp.async.cg copies (one commit group a slice, wait_group STAGES-2), so STAGES - 1 slices are
in flight while the tensor cores work. Fragments come from shared memory through ldmatrix.x4 (.trans
for a row-major b); each tile row's 16-byte chunks are XOR-swizzled so every ldmatrix is free of bank
conflicts; blocks run in groups of GROUP_M row panels so that neighbouring blocks share panels in L2.
b is read in place in both of its common layouts: row-major [K,N] (b.stride(1) == 1) and transposed
([N,K] rows, b.stride(0) == 1: x @ W.T with an nn.Linear weight) are two kernels ("nn", "nt").
Ragged M/N/K edges are zero-filled by cp.async's src-size operand, so any M, N, K works; cp.async needs
16-byte aligned rows, so an operand whose row length or stride is not a multiple of 8 elements (K = 777,
a slice of a wider buffer) is first copied into zero-padded rows (a small extra cost on odd shapes only).
fp32 (3xTF32 m16n16k8 WMMA: hi + lo tf32 parts, three products; plain TF32 was up to 0.048 off on the spec's
large_magnitude stress case on the H200 against atol 1e-2, docs/benchmarks/h200.md) and VARIANT "wmma" use the older
WMMA kernel: 128 x 128 x 32 tiles, one static shared-memory stage refilled from registers, contiguous
copies of a and b. "mma" is Ampere-style mma.sync: on the H200 about half of cuBLAS; it is the default's
fallback off Hopper.

fp16 / bf16 on Hopper (VARIANT "wgmma", the default; sm_90 devices, built for sm_90a): warp-specialised TMA + wgmma.
384 threads: one producer warpgroup (one thread issues cp.async.bulk.tensor copies, 128-byte swizzle, into a
WG_STAGES ring guarded by full/empty mbarriers; setmaxnreg.dec 40) and two consumer warpgroups (setmaxnreg.inc
232), each issuing wgmma.m64nWG_BNk16 from shared memory for 64 rows of the WG_TILE (128 x 256: 128 fp32
accumulators a thread), BK 64. b row-major [K,N] is read as N-major tiles through wgmma's transpose bit (no
copy); b = W.T as K-major tiles. TMA descriptors come from nvrtc.tensor_map (cached per tensor). Elsewhere (no
sm_90, no cuda.bindings) "wgmma" runs the "mma" kernel; rows that TMA cannot address (K or N not a multiple of 8)
are copied into padded rows first, as for "mma".
WG_PERSISTENT: one block an SM walks the tiles in grouped order (the ring runs on across tiles, so the producer
loads the next tile while the consumers store this one). WG_TMA_STORE: the epilogue rounds the accumulators into a
swizzled shared-memory buffer and TMA stores it (whole sectors; the TMA clips the ragged edges), in WG_STORE_SPLIT
passes (2: a 32 KiB buffer, leaving room for a fourth stage). WG_CLUSTER 2: two CTAs computing vertically adjacent
tiles share the B tile through TMA multicast (each loads half; stages freed in both CTAs), for calls with K >=
WG_CLUSTER_MIN_K (8192) only: the multicast halves B's L2-to-SM traffic, which pays where a tile's mainloop is long
(K = 11008: 2-4% faster than without) and cost 2-11% at K = 4096 on the H200; a call below it launches the build
without a cluster. GROUP_M counts block rows either way (a group of GROUP_M / WG_CLUSTER cluster rows).
"""

import math

import torch

from autokernel_ci import nvrtc

KERNEL_TYPE = "matmul"
BACKEND = "cuda"
# TILE = "BMxBN_WARPS_MxWARPS_N" lists only tiles whose warp tile is <= 64 x 64: <= 128 fp32 accumulators a
# thread, which nvcc 13 (sm_90) builds without spills for every TILE x BK (ptxas -v: 97-254 registers).
# Default 128x256 / 8 warps: 64x64 warp tiles (4 A + 4 B ldmatrix.x4 feed 32 mma per 16-deep K step), one
# block an SM (234 registers), 48 KiB a stage at BK 64, 3 stages = 144 KiB: on the H200 1,060-1,125 us at
# the LLaMA-7B GEMMs, against 1,197-1,227 us for BK 32 x 4 stages (benchmarks/variants/cuda_matmul.json).
# STAGES is a ceiling: the launcher lowers it to fit the device's shared memory a block (227 KiB on
# sm_90: at most 4 stages of 48 KiB; 99 KiB on sm_86/89: 2). GROUP_M 16:
# 16 row panels of tiles run column by column, so a B panel is read from DRAM about once per 16 block rows.
# WG_TILE / WG_STAGES: VARIANT "wgmma" only. 128x256 (two 64 x 256 consumer warpgroups, the cuBLAS-class tile):
# 48 KiB a stage; 128x128: 32 KiB a stage, up to 6. ptxas (nvcc 13, sm_90a): 168 registers at launch, 0 spills,
# for both tiles. The default "wgmma" point, 128x256, persistent, TMA-store epilogue in two passes, 4 stages (192 +
# 32 KiB), measured on the H200 in bf16 at the LLaMA-7B GEMMs (M4096 K4096 N11008 / M4096 K11008 N4096; eager
# cuBLAS in the same process, benchmarks/variants/cuda_matmul_*.json): 487-554 / 532-539 us = 0.97-1.13x /
# 0.94-0.97x cuBLAS, against 609-630 / 570-586 us (0.88-0.90x / 0.87-0.89x) for the earlier non-persistent kernel
# with direct stores and 3 stages; persistent alone -1 to -3%, TMA store alone -3 to -6%, both with 3 stages
# -10 to -17% / -3 to -6%. WG_CLUSTER 2 (B multicast) passes every check and runs 532-539 / 524-530 us (the
# default 487-524 / 538-539 us in the same runs); a 128x128 tile 507-581 us with it. WG_CLUSTER_MIN_K 8192 takes the
# cluster where it won, at K = 11008 only; on an H100 (round cluster18, alternating; twelfth session in
# docs/benchmarks/h200.md): 489.8 / 517.0 us against 512.0 / 522.4 without, and 487.2 / 512.1 with a cluster group of
# 16 block rows (GROUP_M now counts block rows, so the default's 16 makes that group); ours / eager / compile in turn
# five times: 0.99x eager (0.92-1.02) where the unclustered kernel had 0.95x (0.93-0.98, round16). The cluster's
# first version, with a cluster-scope release on the remote arrival, ran 697-737 us (MEMBAR.ALL.GPU in the mainloop;
# see nvrtc.mbar_arrive_cluster). Correct on every shape set in bf16 and fp16. Other GPUs run "mma".
# WG_L2_PROMOTION: bytes the L2 fetches per TMA request (nvrtc.tensor_map); 128 (Triton's choice) measured 1-7%
# slower than 256 here. GROUP_M 16 (the Triton Gluon kernel's), round cuda_mm_group, alternating: 536.3-536.5 us at
# K = 11008 against 543.8-545.3 for 8 (+1.4%; repeats within 0.3%), 515.8-546.1 against 494.8-550.5 at K = 4096
# (inside that shape's spread); GROUP_M 4 549.9 / 576.1 us. A whole-tile store with 3 stages, the Gluon kernel's
# other choice, was slower here: 546.2-560.4 us at K = 11008. Stream-K over the last partial wave (4096x11008x4096:
# 116 of 512 tiles split along K over all 132 SMs) was correct and 20% slower on an H100 (617-621 against 511-515 us):
# its pieces start at different K offsets, so blocks sharing a panel stop reading each slice together from L2
# (docs/benchmarks/h200.md, eleventh session).
CONFIG = {"VARIANT": "wgmma", "TILE": "128x256_2x4", "BK": 64, "STAGES": 3, "GROUP_M": 16, "WG_TILE": "128x256",
          "WG_STAGES": 4, "WG_PERSISTENT": True, "WG_TMA_STORE": True, "WG_STORE_SPLIT": 2,
          "WG_L2_PROMOTION": 256, "WG_CLUSTER": 2, "WG_CLUSTER_MIN_K": 8192}
SEARCH_SPACE = {
    "VARIANT": ["wmma", "mma", "wgmma"],
    "TILE": ["64x64_2x2", "128x64_2x2", "64x128_2x2", "128x128_2x2", "128x128_2x4", "128x256_2x4", "256x128_4x2"],
    "BK": [32, 64],
    "STAGES": [2, 3, 4, 5],
    "GROUP_M": [1, 4, 8, 16],
    "WG_TILE": ["128x128", "128x256"],
    "WG_STAGES": [2, 3, 4, 5, 6],
    "WG_PERSISTENT": [False, True],
    "WG_TMA_STORE": [False, True],
    "WG_STORE_SPLIT": [1, 2],
    "WG_L2_PROMOTION": [128, 256],
    "WG_CLUSTER": [1, 2],
    "WG_CLUSTER_MIN_K": [0, 8192],
}
# Knobs that act only under some values of others (the search agent skips moves that rebuild one kernel): the WG_
# knobs only in the wgmma kernel, WG_STORE_SPLIT only with the TMA-store epilogue. TILE / BK / STAGES / GROUP_M are
# not scoped: the wgmma variant falls back to the mma kernel off sm_90 (and GROUP_M orders its tiles too).
KNOB_SCOPE = {"WG_TILE": {"VARIANT": ["wgmma"]}, "WG_STAGES": {"VARIANT": ["wgmma"]},
              "WG_PERSISTENT": {"VARIANT": ["wgmma"]}, "WG_TMA_STORE": {"VARIANT": ["wgmma"]},
              "WG_STORE_SPLIT": {"VARIANT": ["wgmma"], "WG_TMA_STORE": [True]},
              "WG_L2_PROMOTION": {"VARIANT": ["wgmma"]}, "WG_CLUSTER": {"VARIANT": ["wgmma"]},
              "WG_CLUSTER_MIN_K": {"VARIANT": ["wgmma"], "WG_CLUSTER": [2]}}

# nvrtc.PRELUDE (autokernel_ci/prelude.cuh) comes first: <cuda_fp16.h>, <cuda_bf16.h>, INFINITY, to_float(x),
# from_float<T>(f), Vec<T, N> (one aligned 4/8/16-byte access), warp_sum(v), group_sum<WPR>(v, red).
# Compiler error lines count from the r""" line below (the prelude ends with #line 1).
CUDA_SOURCE = nvrtc.PRELUDE + r"""
// Grouped block order (Parts 1 and 3): GROUP row panels of TM x TN tiles run column by column, so consecutive
// blocks share the same B panel and a few A panels while they are in L2. Returns tile `tile`'s first (row, column).
template <int TM, int TN, int GROUP>
__device__ __forceinline__ int2 grouped_tile(int m, int n, int tile) {
    const int tiles_m = (m + TM - 1) / TM, tiles_n = (n + TN - 1) / TN;
    const int per_group = GROUP * tiles_n;
    const int first_m = (tile / per_group) * GROUP;
    const int group_rows = min(tiles_m - first_m, GROUP);
    const int in_group = tile % per_group;
    return make_int2((first_m + in_group % group_rows) * TM, (in_group / group_rows) * TN);
}

// ================= Part 1: fp16 / bf16 -- cp.async pipeline + ldmatrix + mma.sync.m16n8k16 ==================
// Defines: BM, BN (block tile), BK (K slice a stage), WARPS_M x WARPS_N warps, STAGES (shared-memory ring), GROUP_M.
constexpr int MMA_THREADS = WARPS_M * WARPS_N * 32;
constexpr int WTM = BM / WARPS_M;  // warp tile rows
constexpr int WTN = BN / WARPS_N;  // warp tile cols
constexpr int MI = WTM / 16;       // m16 fragments a warp (rows)
constexpr int NI = WTN / 8;        // n8 fragments a warp (cols); ldmatrix.x4 fetches two at a time
static_assert(WTM % 16 == 0 && WTN % 16 == 0, "warp tile must be a multiple of 16 x 16");
static_assert(BK % 16 == 0 && BN % 8 == 0, "BK: multiple of 16 (one mma K step); BN: of 8 (16-byte chunks)");
static_assert(STAGES >= 2, "the pipeline needs at least two stages");

// Element offset of 16-byte chunk c of row r in a tile of CPR chunks a row. The chunk index is XORed
// with bits of the row so that the 8 row addresses of one ldmatrix 8x8 matrix (8 consecutive rows,
// same logical chunk) land in 8 different 16-byte bank groups of a 128-byte line: conflict-free.
// CPR >= 8: c ^ (r & 7) (flips the low 3 bits; stays in the row). CPR = 4 (64-byte rows, two rows a
// line): group = 4 * (r & 1) + (c ^ ((r >> 1) & 3)), 8 distinct values for r = 0..7. CPR = 2 likewise.
template <int CPR>
__device__ __forceinline__ int swz(int r, int c) {
    static_assert(CPR % 8 == 0 || CPR == 4 || CPR == 2, "tile rows of 2, 4 or 8k chunks");
    if constexpr (CPR % 8 == 0) {
        return (r * CPR + (c ^ (r & 7))) * 8;
    } else if constexpr (CPR == 4) {
        return (r * 4 + (c ^ ((r >> 1) & 3))) * 8;
    } else {
        return (r * 2 + (c ^ ((r >> 2) & 1))) * 8;
    }
}

// Two adjacent outputs as one 4-byte store (the caller checks alignment and bounds).
__device__ __forceinline__ void store2(__half* p, float x, float y) {
    *reinterpret_cast<__half2*>(p) = __floats2half2_rn(x, y);
}
__device__ __forceinline__ void store2(__nv_bfloat16* p, float x, float y) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(x, y);
}
// The same pair as the 32-bit word st.shared takes (x in the low half: the lower address).
template <typename T>
__device__ __forceinline__ unsigned pack2(float x, float y);
template <>
__device__ __forceinline__ unsigned pack2<__half>(float x, float y) {
    const __half2 v = __floats2half2_rn(x, y);
    return *reinterpret_cast<const unsigned*>(&v);
}
template <>
__device__ __forceinline__ unsigned pack2<__nv_bfloat16>(float x, float y) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
    return *reinterpret_cast<const unsigned*>(&v);
}

// out[m,n] (contiguous) = a[m,k] (row stride lda) @ b. B_KMAJOR = false: b[k,n] with row stride ldb (n
// contiguous). B_KMAJOR = true: b given as its transpose, rows of k: element (kk, nn) at b[nn * ldb + kk]
// (x @ W.T with W an nn.Linear weight). Needs lda, ldb multiples of 8 elements and 16-byte aligned bases.
template <typename T, bool B_KMAJOR>
__device__ __forceinline__ void mma_gemm(T* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b, int m,
                                         int n, int k, long long lda, long long ldb) {
    static_assert(sizeof(T) == 2, "16-bit inputs only (src-size arithmetic below counts 2 bytes an element)");
    constexpr int A_CPR = BK / 8;                        // 16-byte chunks a row of the A tile [BM][BK]
    constexpr int B_CPR = B_KMAJOR ? BK / 8 : BN / 8;    // B tile: [BN][BK] (k-major) or [BK][BN]
    constexpr int A_CHUNKS = BM * BK / 8, B_CHUNKS = BN * BK / 8;
    constexpr int A_ELEMS = BM * BK, STAGE_ELEMS = (BM + BN) * BK;
    extern __shared__ __align__(128) unsigned char dsmem[];  // STAGES * STAGE_ELEMS elements (launcher sizes it)
    const unsigned sbase = smem_addr(dsmem);  // 32-bit shared-space addresses: cheaper than generic pointers
    constexpr int E = sizeof(T);               // bytes an element: swz() offsets are in elements

    const int2 origin = grouped_tile<BM, BN, GROUP_M>(m, n, blockIdx.x);
    const int bm = origin.x, bn = origin.y;

    auto load_stage = [&](int stage, int k0) {
        const unsigned As = sbase + stage * (STAGE_ELEMS * E);
        const unsigned Bs = As + A_ELEMS * E;
#pragma unroll
        for (int p = 0; p < (A_CHUNKS + MMA_THREADS - 1) / MMA_THREADS; ++p) {
            const int idx = threadIdx.x + p * MMA_THREADS;
            if (A_CHUNKS % MMA_THREADS == 0 || idx < A_CHUNKS) {
                const int r = idx / A_CPR, c = idx % A_CPR;
                const int gr = bm + r, gk = k0 + c * 8;
                const bool in = gr < m && gk < k;
                cp_async16(As + E * swz<A_CPR>(r, c), in ? a + gr * lda + gk : a, in ? min(16, (k - gk) * 2) : 0);
            }
        }
#pragma unroll
        for (int p = 0; p < (B_CHUNKS + MMA_THREADS - 1) / MMA_THREADS; ++p) {
            const int idx = threadIdx.x + p * MMA_THREADS;
            if (B_CHUNKS % MMA_THREADS == 0 || idx < B_CHUNKS) {
                const int r = idx / B_CPR, c = idx % B_CPR;
                if constexpr (B_KMAJOR) {  // row r = column bn + r of the output, chunk c = k0 + 8c..
                    const int gn = bn + r, gk = k0 + c * 8;
                    const bool in = gn < n && gk < k;
                    cp_async16(Bs + E * swz<B_CPR>(r, c), in ? b + gn * ldb + gk : b, in ? min(16, (k - gk) * 2) : 0);
                } else {  // row r = k0 + r, chunk c = columns bn + 8c..
                    const int gk = k0 + r, gn = bn + c * 8;
                    const bool in = gk < k && gn < n;
                    cp_async16(Bs + E * swz<B_CPR>(r, c), in ? b + gk * ldb + gn : b, in ? min(16, (n - gn) * 2) : 0);
                }
            }
        }
    };

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = (warp / WARPS_N) * WTM, wn = (warp % WARPS_N) * WTN;
    float acc[MI][NI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

    // Pipeline: STAGES - 1 slices in flight before the first mma. Exactly one commit group per slice
    // (empty past the end), so at iteration kt groups 0..kt+STAGES-2 exist and wait_group<STAGES-2>
    // leaves at most STAGES-2 pending: slice kt has landed (for this thread; the barrier then makes every
    // thread's copies visible and retires all reads of the stage refilled next, read at kt-1).
    const int ktiles = (k + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < ktiles) load_stage(s, s * BK);
        cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        const int next = kt + STAGES - 1;
        if (next < ktiles) load_stage(next % STAGES, next * BK);
        cp_async_commit();

        const unsigned As = sbase + (kt % STAGES) * (STAGE_ELEMS * E);
        const unsigned Bs = As + A_ELEMS * E;
#pragma unroll
        for (int ks = 0; ks < BK / 16; ++ks) {
            unsigned af[MI][4], bf[NI][2];
            // A 16x16 at rows wm+16i: lane l addresses row (l & 15), k chunk 2ks + (l >> 4): matrices
            // 0..3 = (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15) = a0..a3 regs.
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                ldsm_x4(af[i], As + E * swz<A_CPR>(wm + i * 16 + (lane & 15), 2 * ks + (lane >> 4)));
            }
#pragma unroll
            for (int jj = 0; jj < NI / 2; ++jj) {
                unsigned r[4];
                if constexpr (B_KMAJOR) {
                    // Bs[n][k]: plain ldmatrix; lane l: n row (l & 7) + 8 (l >> 4), k chunk 2ks + ((l >> 3) & 1):
                    // matrices = (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15).
                    const int row = wn + jj * 16 + (lane & 7) + ((lane >> 4) << 3);
                    ldsm_x4(r, Bs + E * swz<B_CPR>(row, 2 * ks + ((lane >> 3) & 1)));
                } else {
                    // Bs[k][n]: .trans; lane l: k row 16ks + (l & 15), n chunk (wn + 16jj) / 8 + (l >> 4):
                    // matrices = (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15).
                    ldsm_x4_trans(r, Bs + E * swz<B_CPR>(ks * 16 + (lane & 15), (wn + jj * 16) / 8 + (lane >> 4)));
                }
                bf[2 * jj][0] = r[0];
                bf[2 * jj][1] = r[1];
                bf[2 * jj + 1][0] = r[2];
                bf[2 * jj + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j) mma16816<T>(acc[i][j], af[i], bf[j][0], bf[j][1]);
        }
    }
    cp_async_wait<0>();  // only empty groups can remain; drain them before the block exits

    // Epilogue straight from the accumulators: lane holds C[g][2t..2t+1] and C[g+8][2t..2t+1] of each
    // 16x8 fragment; pairs go out as one 4-byte store when n is even (then 2t-aligned columns are too).
    const bool pairs = (n & 1) == 0;
#pragma unroll
    for (int i = 0; i < MI; ++i) {
#pragma unroll
        for (int j = 0; j < NI; ++j) {
            const int col = bn + wn + j * 8 + (lane & 3) * 2;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = bm + wm + i * 16 + (lane >> 2) + h * 8;
                if (row >= m || col >= n) continue;
                T* o = out + (long long)row * n + col;
                if (pairs) {
                    store2(o, acc[i][j][2 * h], acc[i][j][2 * h + 1]);
                } else {
                    o[0] = from_float<T>(acc[i][j][2 * h]);
                    if (col + 1 < n) o[1] = from_float<T>(acc[i][j][2 * h + 1]);
                }
            }
        }
    }
}

#define MMA_KERNEL(NAME, T, B_KMAJOR)                                                                              \
    extern "C" __global__ void __launch_bounds__(MMA_THREADS, 1) matmul_mma_##NAME(                                \
        T* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b, int m, int n, int k, long long lda, \
        long long ldb) {                                                                                           \
        mma_gemm<T, B_KMAJOR>(out, a, b, m, n, k, lda, ldb);                                                       \
    }
MMA_KERNEL(f16_nn, __half, false)
MMA_KERNEL(f16_nt, __half, true)
MMA_KERNEL(bf16_nn, __nv_bfloat16, false)
MMA_KERNEL(bf16_nt, __nv_bfloat16, true)

// ================= Part 2: WMMA (fp32 as 3xTF32; also fp16/bf16 under VARIANT "wmma") ==========================
// Defines: WMMA_BM, WMMA_BN, WMMA_BK, WMMA_WARPS_M, WMMA_WARPS_N (fixed in the launcher: _WMMA).
#include <mma.h>
using namespace nvcuda;

// Tensor-core input type and K depth of one WMMA step per storage type.
template <typename T> struct Mma;
template <> struct Mma<__half> { using In = __half; static constexpr int K = 16; };
template <> struct Mma<__nv_bfloat16> { using In = __nv_bfloat16; static constexpr int K = 16; };
template <> struct Mma<float> { using In = wmma::precision::tf32; static constexpr int K = 8; };

constexpr int WMMA_WARPS = WMMA_WARPS_M * WMMA_WARPS_N;
constexpr int WMMA_THREADS = WMMA_WARPS * 32;
constexpr int WMMA_WM = WMMA_BM / WMMA_WARPS_M;  // warp tile
constexpr int WMMA_WN = WMMA_BN / WMMA_WARPS_N;
constexpr int WMMA_FM = WMMA_WM / 16;
constexpr int WMMA_FN = WMMA_WN / 16;
static_assert(WMMA_BM % (16 * WMMA_WARPS_M) == 0 && WMMA_BN % (16 * WMMA_WARPS_N) == 0,
              "WMMA_BM, WMMA_BN must be multiples of 16 * warps");
static_assert(WMMA_BK % 16 == 0, "WMMA_BK must be a multiple of 16");

template <typename T>
struct Smem {
    static constexpr int PAD = 16 / sizeof(T);  // 16-byte row padding: WMMA ldm rule, fewer bank conflicts
    static constexpr int LDA = WMMA_BK + PAD;
    static constexpr int LDB = WMMA_BN + PAD;
    static constexpr int TILES = (WMMA_BM * LDA + WMMA_BK * LDB) * (int)sizeof(T);
    static constexpr int STAGE = WMMA_WARPS * 256 * 4;  // epilogue staging, reuses the tile memory
    static constexpr int BYTES = TILES > STAGE ? TILES : STAGE;
    static_assert(BYTES <= 48 * 1024, "tiles exceed 48 KiB of static shared memory: lower WMMA_BM/BN/BK");
};

template <typename T, int VEC, int R, int C>
struct TileLoader {
    static constexpr int VECS = R * C / VEC;
    static constexpr int PER = (VECS + WMMA_THREADS - 1) / WMMA_THREADS;
    Vec<T, VEC> reg[PER];

    // Rows [r0, r0 + R) x cols [c0, c0 + C) of a row-major rows x cols matrix; zeros outside.
    __device__ __forceinline__ void fetch(const T* __restrict__ src, int rows, int cols, int r0, int c0) {
#pragma unroll
        for (int p = 0; p < PER; ++p) {
            const int idx = threadIdx.x + p * WMMA_THREADS;
            const int r = idx / (C / VEC), c = (idx % (C / VEC)) * VEC;
            const int gr = r0 + r, gc = c0 + c;
            if (idx < VECS && gr < rows && gc < cols) {  // VEC divides cols: the vector is all in or all out
                reg[p] = *reinterpret_cast<const Vec<T, VEC>*>(src + (long long)gr * cols + gc);
            } else {
#pragma unroll
                for (int k = 0; k < VEC; ++k) reg[p].v[k] = from_float<T>(0.f);
            }
        }
    }
    __device__ __forceinline__ void store(T* dst, int ld) const {
#pragma unroll
        for (int p = 0; p < PER; ++p) {
            const int idx = threadIdx.x + p * WMMA_THREADS;
            if (idx < VECS) {
                const int r = idx / (C / VEC), c = (idx % (C / VEC)) * VEC;
                *reinterpret_cast<Vec<T, VEC>*>(dst + r * ld + c) = reg[p];
            }
        }
    }
};

template <typename T, int VEC>
__device__ __forceinline__ void matmul_tile(T* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b,
                                            int m, int n, int k) {
    using S = Smem<T>;
    using In = typename Mma<T>::In;
    constexpr int MK = Mma<T>::K;
    __shared__ __align__(128) unsigned char smem[S::BYTES];
    T* As = reinterpret_cast<T*>(smem);
    T* Bs = As + WMMA_BM * S::LDA;  // WMMA_BM * LDA * sizeof(T): a multiple of 32 bytes (WMMA pointer alignment)

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp / WMMA_WARPS_N, wn = warp % WMMA_WARPS_N;
    const int bm = blockIdx.y * WMMA_BM, bn = blockIdx.x * WMMA_BN;

    wmma::fragment<wmma::accumulator, 16, 16, MK, float> acc[WMMA_FM][WMMA_FN];
#pragma unroll
    for (int i = 0; i < WMMA_FM; ++i)
#pragma unroll
        for (int j = 0; j < WMMA_FN; ++j) wmma::fill_fragment(acc[i][j], 0.f);

    TileLoader<T, VEC, WMMA_BM, WMMA_BK> la;
    TileLoader<T, VEC, WMMA_BK, WMMA_BN> lb;
    la.fetch(a, m, k, bm, 0);
    lb.fetch(b, k, n, 0, bn);
    for (int k0 = 0; k0 < k; k0 += WMMA_BK) {
        la.store(As, S::LDA);
        lb.store(Bs, S::LDB);
        __syncthreads();
        if (k0 + WMMA_BK < k) {  // next slice in flight while the tensor cores work
            la.fetch(a, m, k, bm, k0 + WMMA_BK);
            lb.fetch(b, k, n, k0 + WMMA_BK, bn);
        }
#pragma unroll
        for (int kk = 0; kk < WMMA_BK; kk += MK) {
            // fp32: hi + lo tf32 parts (PRELUDE split_tf32), three products (the small ones first) into a zeroed
            // fragment that is then added to acc on the CUDA cores. Accumulating all three straight into acc on
            // the tensor cores left 0.05 of error where outputs of ~900 cancel (M1000 K777 N1023, atol 1e-2).
            constexpr int LO = sizeof(T) == 4 ? 1 : 0;
            wmma::fragment<wmma::matrix_a, 16, 16, MK, In, wmma::row_major> fa[WMMA_FM], fa_lo[LO ? WMMA_FM : 1];
            wmma::fragment<wmma::matrix_b, 16, 16, MK, In, wmma::row_major> fb[WMMA_FN], fb_lo[LO ? WMMA_FN : 1];
#pragma unroll
            for (int i = 0; i < WMMA_FM; ++i) {
                wmma::load_matrix_sync(fa[i], As + (wm * WMMA_WM + i * 16) * S::LDA + kk, S::LDA);
                if constexpr (LO) split_tf32(fa[i], fa_lo[i]);
            }
#pragma unroll
            for (int j = 0; j < WMMA_FN; ++j) {
                wmma::load_matrix_sync(fb[j], Bs + kk * S::LDB + wn * WMMA_WN + j * 16, S::LDB);
                if constexpr (LO) split_tf32(fb[j], fb_lo[j]);
            }
#pragma unroll
            for (int i = 0; i < WMMA_FM; ++i)
#pragma unroll
                for (int j = 0; j < WMMA_FN; ++j) {
                    if constexpr (LO) {
                        wmma::fragment<wmma::accumulator, 16, 16, MK, float> part;
                        wmma::fill_fragment(part, 0.f);
                        wmma::mma_sync(part, fa_lo[i], fb[j], part);
                        wmma::mma_sync(part, fa[i], fb_lo[j], part);
                        wmma::mma_sync(part, fa[i], fb[j], part);
#pragma unroll
                        for (int e = 0; e < part.num_elements; ++e) acc[i][j].x[e] += part.x[e];
                    } else {
                        wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
                    }
                }
        }
        __syncthreads();
    }

    // Epilogue: each 16x16 accumulator goes through this warp's staging tile (the tiles' memory: the
    // loop's last __syncthreads() has retired every read of it), then to global with bounds.
    float* Cs = reinterpret_cast<float*>(smem) + warp * 256;
#pragma unroll
    for (int i = 0; i < WMMA_FM; ++i) {
#pragma unroll
        for (int j = 0; j < WMMA_FN; ++j) {
            wmma::store_matrix_sync(Cs, acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            const int r0 = bm + wm * WMMA_WM + i * 16, c0 = bn + wn * WMMA_WN + j * 16;
#pragma unroll
            for (int e = lane; e < 256; e += 32) {
                const int r = r0 + e / 16, c = c0 + e % 16;
                if (r < m && c < n) out[(long long)r * n + c] = from_float<T>(Cs[e]);
            }
            __syncwarp();
        }
    }
}

#define VEC_OF(T) ((int)(16 / sizeof(T)))
#define MATMUL_KERNEL(NAME, T, VEC)                                                                          \
    extern "C" __global__ void __launch_bounds__(WMMA_THREADS) matmul_##NAME(                                \
        T* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b, int m, int n, int k) {        \
        matmul_tile<T, VEC>(out, a, b, m, n, k);                                                             \
    }
#define MATMUL_DTYPE(SUFFIX, T)              \
    MATMUL_KERNEL(SUFFIX##_v, T, VEC_OF(T))  \
    MATMUL_KERNEL(SUFFIX##_s, T, 1)

MATMUL_DTYPE(f32, float)
MATMUL_DTYPE(f16, __half)
MATMUL_DTYPE(bf16, __nv_bfloat16)

// ================= Part 3: fp16 / bf16 on Hopper (sm_90a) -- TMA + mbarrier ring + wgmma, warp-specialised ==========
// Defines: WG_BM x WG_BN (block tile: 128 x 256 or 128 x 128), WG_STAGES (shared-memory ring), GROUP_M (as Part 1).
// 384 threads = 3 warpgroups. Warpgroup 0 is the producer: one thread issues the TMA copies of every K slice
// (cp.async.bulk.tensor, 128-byte swizzle) into a WG_STAGES ring and arms its "full" mbarrier with the byte count;
// the other 127 threads have nothing to do, so the warpgroup gives registers back (setmaxnreg.dec 40). Warpgroups
// 1 and 2 are consumers (setmaxnreg.inc 232): each owns 64 rows of the tile and issues wgmma.m64nWG_BNk16 straight
// from shared memory (4 a slice, BK = 64), fp32 accumulators in registers (WG_BN / 2 a thread: 128 at BN 256),
// and releases the stage through its "empty" mbarrier once the wgmma that read it has completed.
// Register budget: 128 x 40 + 256 x 232 = 64,512 <= 65,536 registers of an SM (one block an SM).
// wgmma, setmaxnreg and the tensor-map fence exist only on sm_90a (arch-specific): the launcher builds this file for
// sm_90a on an sm_90 device and uses Part 1 anywhere else; other arches compile the kernels as traps.
constexpr int WG_BK = 64;                         // 64 16-bit elements = 128 bytes = one 128B-swizzle row
constexpr int WG_THREADS = 384;
constexpr int WG_A_BYTES = WG_BM * WG_BK * 2;     // 16 KiB
constexpr int WG_B_BYTES = WG_BN * WG_BK * 2;     // 32 KiB at BN 256
constexpr int WG_STAGE_BYTES = WG_A_BYTES + WG_B_BYTES;
// WG_TMA_STORE: the output tile goes out through shared memory and TMA stores (bf16/fp16 tile, 64 KiB at 128 x 256)
// in WG_STORE_SPLIT passes of WG_BN / WG_STORE_SPLIT columns (a 32 KiB buffer at 128 x 256 leaves room for 4 stages)
constexpr int WG_STORE_COLS = WG_BN / WG_STORE_SPLIT;
constexpr int WG_OUT_BYTES = WG_TMA_STORE ? WG_BM * WG_STORE_COLS * 2 : 0;
static_assert(WG_STORE_COLS % 64 == 0, "whole 64-column TMA boxes a pass");
constexpr int WG_CONSUMER_WARPS = 8;  // lane 0 of each consumer warp frees a stage (in every CTA of the cluster)
// WG_CLUSTER CTAs (1 or 2) compute vertically adjacent tiles that share their B panel: each loads its own A tile and
// 1 / WG_CLUSTER of the B tile, multicast into every CTA of the cluster (the L2 serves B once for the cluster).
static_assert(WG_BM == 128, "two consumer warpgroups x 64 rows (wgmma's M)");
static_assert(WG_BN == 128 || WG_BN == 256, "wgmma m64nNk16 instantiated for N = 128 and 256");
static_assert(WG_STAGES >= 2, "the ring needs at least two stages");
static_assert(WG_CLUSTER == 1 || WG_CLUSTER == 2, "clusters of one or two CTAs");
// GROUP_M counts block rows: a group holds GROUP_M / WG_CLUSTER rows of cluster tiles (at least one), the same L2
// footprint clustered or not (clustered at K = 11008 on an H100: 487-512 us at this count, 490-517 at twice it).
constexpr int WG_GROUP = GROUP_M / WG_CLUSTER > 0 ? GROUP_M / WG_CLUSTER : 1;

// mbar_*, tma_load_2d, tensormap_acquire, wg_desc, wg_fence / wg_commit / wg_wait / wg_fence_acc and
// Wgmma<T, N, TRANS_B> come from nvrtc.PRELUDE (its sm_90a block, autokernel_ci/prelude.cuh),
// shared with flash attention.

// out[m,n] (contiguous) = a @ b through tensor maps (built by the launcher, nvrtc.tensor_map, 128-byte swizzle):
//   map_a: a [m, k] rows, box 64 (k) x 128 (rows)                      -> A tile [128 rows][128 B], K-major
//   B_KMAJOR (b = W.T, W [n, k] rows): map_b box 64 (k) x WG_BN (rows)  -> B tile [WG_BN rows][128 B], K-major
//   !B_KMAJOR (b [k, n] rows): map_b box 64 (n) x 64 (k), WG_BN / 64 boxes a slice -> WG_BN / 64 blocks of
//       [64 k-rows][128 B of n], N-major: wgmma reads them transposed (imm-trans-b = 1), no copy of b.
// Descriptors (LBO / SBO in bytes; the layouts are the PTX ISA's canonical 128B-swizzle ones, checked on the CPU by
// tests/kernels/test_cuda_matmul_layout.py):
//   K-major (A, B of nt): rows of 128 bytes, 8-row core groups 1024 bytes apart -> SBO 1024; LBO unused (16);
//       k step ks (16 elements = 32 bytes) starts 32 ks bytes into the row: the hardware applies the swizzle XOR to
//       the final address, exactly as the TMA did when it wrote the tile.
//   N-major (B of nn): ((8 x 16 B along n, n / 64 blocks), (8 k-rows, k / 8 groups)) -> 64-element n blocks one TMA
//       box apart: LBO = 64 rows x 128 B = 8192; 8-row k groups: SBO = 1024; k step ks starts 16 ks rows = 2048 ks
//       bytes in.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Epilogue through TMA (WG_TMA_STORE): one consumer warpgroup's 64 x WG_BN accumulators, rounded to T, go into its
// half of the shared output buffer, WG_STORE_COLS columns a pass, as boxes of [64 rows][128 B] in the 128-byte swizzle
// (16-byte chunk c of row r at chunk c ^ (r % 8): a warp's 32 four-byte stores hit 32 different banks), then one
// thread stores the boxes with cp.async.bulk.tensor; the TMA drops rows and columns past m and n. Writing whole
// 32-byte sectors: the direct epilogue's 4-byte stores cover 16 of each sector's 32 bytes per instruction (ncu:
// twice the L2 write sectors). Named barrier 1 + warpgroup index (0 is __syncthreads) orders the 128 threads: the
// previous pass's store has read the buffer before anyone overwrites it, and every write is visible to the async
// proxy before the store is issued.
template <typename T>
__device__ __forceinline__ void store_tile_tma(const float (&acc)[WG_BN / 2], const void* map_out, unsigned buf,
                                               int wg, int t, int warp, int lane, int row0, int col0) {
    const int r = warp * 16 + (lane >> 2);  // rows r and r + 8: both have r % 8 == lane / 4
#pragma unroll
    for (int pass = 0; pass < WG_STORE_SPLIT; ++pass) {
        if (t == 0) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
        asm volatile("bar.sync %0, 128;\n" ::"r"(wg) : "memory");
#pragma unroll
        for (int jj = 0; jj < WG_STORE_COLS / 8; ++jj) {
            const int j = pass * (WG_STORE_COLS / 8) + jj;  // 8-column group of the accumulator fragment
            const unsigned chunk = ((jj % 8) ^ (lane >> 2)) * 16 + 4 * (lane & 3);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const unsigned addr = buf + (jj / 8) * 8192 + (r + 8 * h) * 128 + chunk;
                const unsigned pair = pack2<T>(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(pair) : "memory");
            }
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic-proxy writes -> the TMA's reads
        asm volatile("bar.sync %0, 128;\n" ::"r"(wg) : "memory");
        if (t == 0) {
#pragma unroll
            for (int b = 0; b < WG_STORE_COLS / 64; ++b) {
                asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%1, %2}], [%3];\n"
                             ::"l"(map_out), "r"(col0 + pass * WG_STORE_COLS + 64 * b), "r"(row0),
                             "r"(buf + b * 8192) : "memory");
            }
            asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
        }
    }
}
#endif

// x, as a value the compiler cannot see into (so it keeps x in a register instead of recomputing it where used).
__device__ __forceinline__ unsigned opaque(unsigned x) {
    asm volatile("mov.b32 %0, %0;\n" : "+r"(x));
    return x;
}

// The consumer warpgroup WG (1: rows 0-63 of each tile, 2: rows 64-127) of wgmma_gemm below, a template on WG so
// that every wgmma descriptor is warp-uniform to ptxas: built once and advanced by constant offsets in uniform
// registers. With the index read from threadIdx (vector registers) the 4 wgmma of a K slice had their descriptors
// rebuilt and moved to uniform registers: 93 SASS instructions a slice; 70.7 M executed at 4096x11008x4096 against
// 41.1 M for the Gluon kernel and 43.1 M for cuBLAS (ncu), where the GPU runs at its power limit (1.62 GHz). With the
// ring counters and pinned descriptor words below the slice is 45 instructions (62 before; nvcc 13.0, sm_90a).
template <int WG, typename T, bool B_KMAJOR>
__device__ __forceinline__ void wgmma_consume(T* __restrict__ out, const void* map_out, int m, int n, unsigned base,
                                              unsigned out_tile, unsigned bars, int ctiles, int ktiles, unsigned rank,
                                              int first, int step) {
    constexpr int wg = WG;
    // Stage 0's descriptors: this warpgroup's 64 rows of 128 bytes in the A tile, and the B tile; stage s and k step
    // ks add s * WG_STAGE_BYTES and the step's offset to the start-address word (below).
    const unsigned long long da0 = wg_desc(base + (WG - 1) * 64 * 128, 16, 1024);
    const unsigned long long db0 = B_KMAJOR ? wg_desc(base + WG_A_BYTES, 16, 1024)
                                            : wg_desc(base + WG_A_BYTES, 8192, 1024);
    const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
    // Pairs of columns go out as one 4-byte store when n is even (then every even column is 4-byte aligned).
    const bool pairs = (n & 1) == 0;
    // The thread that issues this warpgroup's TMA stores takes the output map through the tensormap proxy, as the
    // producer does for its maps (a map's bytes may be reused for another tensor's after nvrtc's cache evicts it).
    if (WG_TMA_STORE && t == 0 && map_out != nullptr) tensormap_acquire(map_out);
    float acc[WG_BN / 2];
    // The ring position of this block's next K slice, run on across its tiles: the stage, the parity of the stage's
    // full-barrier phase, and the stage the slice before read (freed one slice late). Counters instead of it % STAGES
    // and it / STAGES: the signed divisions took 8 SASS instructions a slice.
    unsigned stage = 0, parity = 0, prev = 0;
    // The descriptors' low words (start address / 16 in bits 0-13, LBO above; the SBO and swizzle word stays
    // constant): stage s, k step ks of the A and B tiles start s * WG_STAGE_BYTES + 32 ks (A, K-major B) or + 2048 ks
    // (N-major B) bytes further. A shared address stays below 228 KiB, so address / 16 < 2^14: the field never
    // carries into LBO (as desc_plus in nvrtc.PRELUDE).
    // Pinned through an opaque move: otherwise ptxas rebuilt both words from the shared base in every slice (8 SASS).
    const unsigned da_lo = opaque((unsigned)da0), db_lo = opaque((unsigned)db0);
    const unsigned long long da_hi = da0 & 0xFFFFFFFF00000000ull, db_hi = db0 & 0xFFFFFFFF00000000ull;
    // Frees stage s in every CTA of the cluster (each CTA's producer refills its own and the others' stages).
    auto release = [&](unsigned s) {
        if (lane != 0) return;
        mbar_arrive(bars + 8 * (WG_STAGES + s));
        if (WG_CLUSTER > 1) mbar_arrive_cluster(bars + 8 * (WG_STAGES + s), rank ^ 1);
    };
    for (int ct = first; ct < ctiles; ct += step) {
        int2 origin = grouped_tile<WG_CLUSTER * WG_BM, WG_BN, WG_GROUP>(m, n, ct);
        origin.x += rank * WG_BM;
#pragma unroll
        for (int i = 0; i < WG_BN / 2; ++i) acc[i] = 0.f;
        for (int kt = 0; kt < ktiles; ++kt) {
            mbar_wait(bars + 8 * stage, parity);
            wg_fence_acc(acc);
            wg_fence();
            const unsigned at = stage * (WG_STAGE_BYTES >> 4);
#pragma unroll
            for (int ks = 0; ks < WG_BK / 16; ++ks) {
                const unsigned long long da = da_hi | (da_lo + at + 2 * ks);
                const unsigned long long db = db_hi | (db_lo + at + (B_KMAJOR ? 2 : 128) * ks);
                Wgmma<T, WG_BN, B_KMAJOR ? 0 : 1>::run(acc, da, db, 1);
            }
            wg_commit();
            // Keep this slice's 4 wgmma in flight; the previous slice's have completed: free its stage.
            wg_wait<1>();
            wg_fence_acc(acc);
            if (kt > 0) release(prev);
            prev = stage;
            if (++stage == WG_STAGES) {
                stage = 0;
                parity ^= 1;
            }
        }
        wg_wait<0>();
        wg_fence_acc(acc);
        // The tile's last slice is read: free its stage before the epilogue, so the producer can refill it.
        release(prev);

        if (WG_TMA_STORE && map_out != nullptr) {
            store_tile_tma<T>(acc, map_out, out_tile + (wg - 1) * (WG_OUT_BYTES / 2), wg, t, warp, lane,
                              origin.x + (wg - 1) * 64, origin.y);
            continue;
        }
        // Epilogue straight from the accumulators (fragment layout above), bounds-checked.
        const int row0 = origin.x + (wg - 1) * 64 + warp * 16 + (lane >> 2);
#pragma unroll
        for (int j = 0; j < WG_BN / 8; ++j) {
            const int col = origin.y + 8 * j + 2 * (lane & 3);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = row0 + 8 * h;
                if (row >= m || col >= n) continue;
                T* o = out + (long long)row * n + col;
                if (pairs) {
                    store2(o, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
                } else {
                    o[0] = from_float<T>(acc[4 * j + 2 * h]);
                    if (col + 1 < n) o[1] = from_float<T>(acc[4 * j + 2 * h + 1]);
                }
            }
        }
    }
    // The shared-memory tile must outlive the last TMA store's read of it.
    if (WG_TMA_STORE && t == 0) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}

template <typename T, bool B_KMAJOR>
__device__ __forceinline__ void wgmma_gemm(T* __restrict__ out, const void* map_a, const void* map_b,
                                           const void* map_out, int m, int n, int k) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    extern __shared__ __align__(128) unsigned char dsmem[];  // same declaration as Part 1 (one symbol)
    // 128B-swizzled tiles must start on a 1024-byte boundary (the pattern repeats every 8 rows of 128 bytes and both
    // the TMA and wgmma take the row phase from address bits 7-9): round up; the launcher adds 1 KiB of slack.
    const unsigned base = (smem_addr(dsmem) + 1023u) & ~1023u;
    const unsigned out_tile = base + WG_STAGES * WG_STAGE_BYTES;  // WG_OUT_BYTES (1024-aligned: stages are 16 KiB)
    const unsigned bars = out_tile + WG_OUT_BYTES;  // full[s] at bars + 8 s, empty[s] after them
    const int wg = threadIdx.x / 128;

    // Cluster tiles: WG_CLUSTER x 1 block tiles sharing one B panel; this CTA computes the rank-th of them.
    const int ctiles = ((m + WG_CLUSTER * WG_BM - 1) / (WG_CLUSTER * WG_BM)) * ((n + WG_BN - 1) / WG_BN);
    const int ktiles = (k + WG_BK - 1) / WG_BK;  // >= 1: kernel_fn answers k == 0 with zeros and launches nothing
    const unsigned rank = WG_CLUSTER > 1 ? cluster_ctarank() : 0;
    const int first = blockIdx.x / WG_CLUSTER, step = gridDim.x / WG_CLUSTER;  // gridDim.x: a multiple of WG_CLUSTER

    if (threadIdx.x == 0) {
#pragma unroll
        for (int s = 0; s < WG_STAGES; ++s) {
            mbar_init(bars + 8 * s, 1);                                         // the producer's arrive.expect_tx
            // one arrival a consumer warp of every CTA in the cluster: a stage is refilled in all of them at once
            mbar_init(bars + 8 * (WG_STAGES + s), WG_CONSUMER_WARPS * WG_CLUSTER);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the async proxy (TMA)
    }
    // The last block-wide barrier: the roles below never wait for each other's threads. In a cluster, the other
    // CTA's barriers must be initialised before this CTA's multicast copies or arrivals reach them.
    if (WG_CLUSTER > 1) cluster_sync(); else __syncthreads();

    // Cluster tiles first, first + step, ... in grouped order: one a cluster when the launcher gives every cluster
    // tile its CTAs, several when it launches one CTA an SM (WG_PERSISTENT). `it` counts K slices over all of this
    // block's tiles, so the ring's stage (it % WG_STAGES) and mbarrier phase ((it / WG_STAGES) & 1) run on across
    // tiles and the producer fills the next tile's first stages while the consumers store the last tile. Both CTAs
    // of a cluster walk the same tiles and slices (a tile past m computes zeros and stores nothing).
    if (wg == 0) {  // ---- producer ----
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (threadIdx.x == 0) {
            tensormap_acquire(map_a);
            tensormap_acquire(map_b);
            int it = 0;
            for (int ct = first; ct < ctiles; ct += step) {
                int2 origin = grouped_tile<WG_CLUSTER * WG_BM, WG_BN, WG_GROUP>(m, n, ct);
                origin.x += rank * WG_BM;
                for (int kt = 0; kt < ktiles; ++kt, ++it) {
                    const int s = it % WG_STAGES;
                    // Stage s last held slice it - STAGES: wait for the ((it / STAGES) - 1)-th release of it.
                    if (it >= WG_STAGES) mbar_wait(bars + 8 * (WG_STAGES + s), ((it / WG_STAGES) - 1) & 1);
                    const unsigned full = bars + 8 * s;
                    const unsigned As = base + s * WG_STAGE_BYTES, Bs = As + WG_A_BYTES;
                    mbar_arrive_expect_tx(full, WG_STAGE_BYTES);
                    tma_load_2d(As, map_a, full, kt * WG_BK, origin.x);
                    if constexpr (WG_CLUSTER == 1) {
                        if constexpr (B_KMAJOR) {
                            tma_load_2d(Bs, map_b, full, kt * WG_BK, origin.y);
                        } else {
#pragma unroll
                            for (int j = 0; j < WG_BN / 64; ++j) {  // one 64 (n) x 64 (k) box = 8 KiB a 64 columns
                                tma_load_2d(Bs + j * 8192, map_b, full, origin.y + 64 * j, kt * WG_BK);
                            }
                        }
                    } else if constexpr (B_KMAJOR) {  // rows rank * BN/2 .. of the [BN rows][128 B] tile (box BN/2)
                        tma_load_2d_multicast(Bs + rank * (WG_B_BYTES / 2), map_b, full, kt * WG_BK,
                                              origin.y + rank * (WG_BN / 2), 3);
                    } else {  // 64-column blocks rank * BN/128 ..
#pragma unroll
                        for (int jj = 0; jj < WG_BN / 128; ++jj) {
                            const int j = rank * (WG_BN / 128) + jj;
                            tma_load_2d_multicast(Bs + j * 8192, map_b, full, origin.y + 64 * j, kt * WG_BK, 3);
                        }
                    }
                }
            }
        }
    } else {  // ---- consumers: warpgroup 1 rows 0-63 of the tile, warpgroup 2 rows 64-127 ----
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        if (wg == 1) {
            wgmma_consume<1, T, B_KMAJOR>(out, map_out, m, n, base, out_tile, bars, ctiles, ktiles, rank, first, step);
        } else {
            wgmma_consume<2, T, B_KMAJOR>(out, map_out, m, n, base, out_tile, bars, ctiles, ktiles, rank, first, step);
        }
    }
    // The other CTA may still arrive on this CTA's barriers (its consumers free the last stages here too): no CTA of
    // the cluster exits before all are done.
    if (WG_CLUSTER > 1) cluster_sync();
#else
    __trap();  // built for an arch without wgmma: the launcher never launches this (it builds sm_90a or uses Part 1)
#endif
}

// Before __global__: the kernel's name stays where kernelfile's name pattern finds it (`__global__ ... void NAME(`).
#if WG_CLUSTER > 1
#define WG_CLUSTER_DIMS __cluster_dims__(WG_CLUSTER, 1, 1)
#else
#define WG_CLUSTER_DIMS
#endif
#define WGMMA_KERNEL(NAME, T, B_KMAJOR)                                                                          \
    extern "C" WG_CLUSTER_DIMS __global__ void __launch_bounds__(WG_THREADS, 1) matmul_wgmma_##NAME(             \
        T* __restrict__ out, const void* __restrict__ map_a, const void* __restrict__ map_b,                    \
        const void* __restrict__ map_out, int m, int n, int k) {                                                 \
        wgmma_gemm<T, B_KMAJOR>(out, map_a, map_b, map_out, m, n, k);                                            \
    }
WGMMA_KERNEL(f16_nn, __half, false)
WGMMA_KERNEL(f16_nt, __half, true)
WGMMA_KERNEL(bf16_nn, __nv_bfloat16, false)
WGMMA_KERNEL(bf16_nt, __nv_bfloat16, true)
"""

_SUFFIX = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
# The WMMA kernel's tile (fixed: the fp32 tiles must fit 48 KiB of static shared memory).
_WMMA = {"WMMA_BM": 128, "WMMA_BN": 128, "WMMA_BK": 32, "WMMA_WARPS_M": 2, "WMMA_WARPS_N": 4}
_SHARED_LIMIT = nvrtc.SM90_SHARED_BYTES  # the default the pipelines are sized for (builds, tests)


def _tile():
    """(BM, BN, WARPS_M, WARPS_N) from CONFIG["TILE"], e.g. "128x256_2x4"."""
    block, warps = CONFIG["TILE"].split("_")
    bm, bn = (int(v) for v in block.split("x"))
    wm, wn = (int(v) for v in warps.split("x"))
    return bm, bn, wm, wn


def _stage_bytes():
    bm, bn, _, _ = _tile()
    return (bm + bn) * CONFIG["BK"] * 2  # 16-bit elements


def _stages(limit=_SHARED_LIMIT):
    return max(2, min(CONFIG["STAGES"], limit // _stage_bytes()))


def _wg_tile():
    """(WG_BM, WG_BN) from CONFIG["WG_TILE"], e.g. "128x256"."""
    bm, bn = (int(v) for v in CONFIG["WG_TILE"].split("x"))
    return bm, bn


# Shared memory beyond the wgmma ring: up to 1 KiB to round the ring's start up to 1024 bytes (128B-swizzle tiles),
# then 2 x 8 bytes of mbarriers a stage (<= 1 KiB).
_WG_SLACK = 2048


def _wg_stage_bytes():
    bm, bn = _wg_tile()
    return (bm + bn) * 64 * 2  # BK 64 of 16-bit elements: 48 KiB at 128x256, 32 KiB at 128x128


def _wg_out_bytes():
    """The shared output buffer of WG_TMA_STORE (16-bit elements, WG_STORE_SPLIT passes): 64 KiB at 128x256 in one
    pass, 32 KiB in two; nothing without WG_TMA_STORE."""
    bm, bn = _wg_tile()
    return bm * bn * 2 // CONFIG["WG_STORE_SPLIT"] if CONFIG["WG_TMA_STORE"] else 0


def _wg_stages(limit=_SHARED_LIMIT):
    return max(2, min(CONFIG["WG_STAGES"], (limit - _WG_SLACK - _wg_out_bytes()) // _wg_stage_bytes()))


def _wg_shared(limit=_SHARED_LIMIT):
    return _wg_stages(limit) * _wg_stage_bytes() + _wg_out_bytes() + _WG_SLACK


def _wg_cluster(k: int) -> int:
    """The cluster size of a call with this K: WG_CLUSTER where K >= WG_CLUSTER_MIN_K, else 1 (the multicast pays
    where a tile's mainloop is long; see WG_CLUSTER_MIN_K above)."""
    return CONFIG["WG_CLUSTER"] if k >= CONFIG["WG_CLUSTER_MIN_K"] else 1


_BUILDS = {}  # (CONFIG's items, limit, cluster) -> _build's tuple (nvrtc.remembered)


def _build(limit=_SHARED_LIMIT, cluster=None):
    """(defines, mma tile (BM, BN, WARPS_M, WARPS_N), mma shared bytes, wgmma tile (WG_BM, WG_BN), wgmma shared bytes)
    of CONFIG as it is now (a CONFIG changed in place gets its own) at this shared-memory limit; `cluster` (a call's
    _wg_cluster; 1 for the builds without wgmma) overrides WG_CLUSTER. The defines are not to be mutated."""
    # Kept: the CONFIG strings' parsing and the shared-memory arithmetic cost 5.3 us (defines) + 2.9 us (wgmma's
    # shared bytes) a call on the development CPU, a lookup 0.9 us; a whole call on an H100 43-50 -> 36-40 us of host
    # time (docs/benchmarks/h200.md, sixteenth session).
    return nvrtc.remembered(_BUILDS, (tuple(CONFIG.items()), limit, cluster), _new_build, limit, cluster)


def _new_build(limit, cluster):
    return (_parse_defines(limit, cluster), _tile(), _stages(limit) * _stage_bytes(), _wg_tile(), _wg_shared(limit))


def _defines(limit=_SHARED_LIMIT, cluster=None):
    """The build's defines (_build's; not to be mutated)."""
    return _build(limit, cluster)[0]


def _parse_defines(limit, cluster):
    bm, bn, wm, wn = _tile()
    wg_bm, wg_bn = _wg_tile()
    return {"BM": bm, "BN": bn, "BK": CONFIG["BK"], "WARPS_M": wm, "WARPS_N": wn, "STAGES": _stages(limit),
            "GROUP_M": CONFIG["GROUP_M"], "WG_BM": wg_bm, "WG_BN": wg_bn, "WG_STAGES": _wg_stages(limit),
            "WG_TMA_STORE": int(bool(CONFIG["WG_TMA_STORE"])), "WG_STORE_SPLIT": CONFIG["WG_STORE_SPLIT"],
            "WG_CLUSTER": CONFIG["WG_CLUSTER"] if cluster is None else cluster, **_WMMA}


_WMMA_NAMES = [f"matmul_{s}_{v}" for s in _SUFFIX.values() for v in "sv"]
_MMA_NAMES = [f"matmul_mma_{s}_{lay}" for s in ("f16", "bf16") for lay in ("nn", "nt")]
_WGMMA_NAMES = [f"matmul_wgmma_{s}_{lay}" for s in ("f16", "bf16") for lay in ("nn", "nt")]


def cuda_builds():
    """(source, defines, kernel names[, arch]) of every build kernel_fn may request (the tests compile each; no arch:
    the device's own, sm_90 in the tests). The sm_90 build holds the wgmma kernels as traps (never launched); the
    sm_90a ones are the wgmma kernels at CONFIG's cluster and, where WG_CLUSTER_MIN_K splits the calls, without one."""
    names = _WMMA_NAMES + _MMA_NAMES + _WGMMA_NAMES
    # The build for the device's own arch holds the wgmma kernels as traps, without a cluster: __cluster_dims__ does
    # not compile before sm_90 (A100, L4, RTX 4090 run this build's "mma" / "wmma" kernels).
    builds = [(CUDA_SOURCE, _defines(cluster=1), names)]
    if CONFIG["WG_CLUSTER"] > 1 and CONFIG["WG_CLUSTER_MIN_K"] > 0:  # calls below WG_CLUSTER_MIN_K: no cluster
        builds.append((CUDA_SOURCE, _defines(cluster=1), _WGMMA_NAMES, nvrtc.WGMMA_ARCH))
    return builds + [(CUDA_SOURCE, _defines(), names, nvrtc.WGMMA_ARCH)]  # CONFIG's own sm_90a build last


def _kernel(name, defines, arch=None):
    """`name` from the build of these defines (the launch's own _build, so a call looks it up once)."""
    return nvrtc.compile_kernel(CUDA_SOURCE, name, defines=defines, arch=arch, source_name="matmul.cu")


def _rows16(t):
    """Row stride of a 2-D 16-bit tensor whose rows are unit-stride and 16-byte aligned (cp.async), else None."""
    rows, cols = t.shape
    row_stride = t.stride(0) if rows > 1 else 0  # a size-1 dim's stride is never used
    if (cols == 1 or t.stride(1) == 1) and row_stride % 8 == 0 and t.data_ptr() % 16 == 0:
        return row_stride
    return None


def _aligned_rows(t):
    """t when its rows suit cp.async / TMA as they are; else a copy whose rows are padded with zeros to a multiple
    of 8 elements (16 bytes), viewed at t's width. The kernels never read the padding (their bounds are the true
    K / N), so only odd-sized or unaligned operands pay for this copy."""
    if _rows16(t) is not None:
        return t
    rows, cols = t.shape
    padded = torch.zeros((rows, -(-cols // 8) * 8), dtype=t.dtype, device=t.device)
    padded[:, :cols] = t
    return padded[:, :cols]


def _operands(a, b):
    """(a, layout, b rows) with every row 16-byte aligned, as cp.async and TMA read them. layout "nn": b's own
    [K, N] rows; "nt": the [N, K] rows of b.T (b = W.T with W an nn.Linear weight, read in place). An operand
    without aligned rows is copied (_aligned_rows), keeping b's major order."""
    a = _aligned_rows(a)
    if _rows16(b) is not None:
        return a, "nn", b
    if _rows16(b.t()) is not None:
        return a, "nt", b.t()
    if b.stride(0) < b.stride(1):
        return a, "nt", _aligned_rows(b.t())
    return a, "nn", _aligned_rows(b)


def _launch_mma(out, a, layout, b_rows, m, n, k):
    """The pipelined fp16/bf16 kernel on _operands' a, layout and b rows (b read in place when it is row-major or a
    transposed row-major W)."""
    lda, ldb = _rows16(a), _rows16(b_rows)
    limit = nvrtc.shared_memory_limit(a.device)
    defines, (bm, bn, wm, wn), shared, _, _ = _build(limit, 1)  # cluster 1: no __cluster_dims__ without wgmma
    kernel = _kernel(f"matmul_mma_{_SUFFIX[a.dtype]}_{layout}", defines)
    grid = (math.ceil(m / bm) * math.ceil(n / bn),)
    nvrtc.launch(kernel, grid=grid, block=(wm * wn * 32,), shared_mem=shared,
                 args=(out, a, b_rows, nvrtc.i32(m), nvrtc.i32(n), nvrtc.i32(k), nvrtc.i64(lda), nvrtc.i64(ldb)))


_wgmma_arch = nvrtc.wgmma_arch  # sm_90a on sm_90 devices, else None ("mma" runs)


_sm_count = nvrtc.sm_count


def _launch_wgmma(out, a, layout, rows, m, n, k):
    """The TMA + wgmma kernel on _operands' a, layout and b rows; False (nothing launched) where it cannot run: the
    caller then uses "mma" on the same operands.

    TMA needs 16-byte aligned bases and row strides; _operands gives both kernels such rows (padded copies where
    needed), so wgmma runs on every shape (K = 777 too) and the GPU check's odd and edge sets exercise its ragged
    edges. TMA zero-fills the boxes past M, N, K; the epilogue bounds its stores.
    """
    arch = _wgmma_arch(a.device)
    if arch is None:
        return False
    why = nvrtc.tensor_maps_unusable()
    if why:  # known up front (no bindings, graph capture): no map is asked for
        nvrtc.warn_once(f"matmul VARIANT 'wgmma' falls back to 'mma': {why}")
        return False
    # "nn": b's [K, N] rows are N-major tiles, read transposed by wgmma; "nt": W's [N, K] rows are K-major, like a's.
    cluster = _wg_cluster(k)
    limit = nvrtc.shared_memory_limit(a.device)
    defines, _, _, (bm, bn), shared = _build(limit, cluster)
    try:  # boxes (rows, 64 elements = 128 bytes), 128-byte swizzle: the tile layouts Part 3's descriptors expect
        promote = CONFIG["WG_L2_PROMOTION"]
        map_a = nvrtc.tensor_map(a, (bm, 64), swizzle=128, l2_promotion=promote)
        # nt with a cluster: each CTA loads its 1 / WG_CLUSTER of the B tile's rows and multicasts it
        map_b = nvrtc.tensor_map(rows, (64, 64) if layout == "nn" else (bn // cluster, 64), swizzle=128,
                                 l2_promotion=promote)
    except nvrtc.TensorMapError as exc:
        nvrtc.warn_once(f"matmul VARIANT 'wgmma' falls back to 'mma': {exc}")
        return False
    map_out = _out_map(out)
    kernel = _kernel(f"matmul_wgmma_{_SUFFIX[a.dtype]}_{layout}", defines, arch=arch)
    ctiles = math.ceil(m / (cluster * bm)) * math.ceil(n / bn)  # cluster tiles: `cluster` tiles along M sharing B
    if CONFIG["WG_PERSISTENT"]:  # one block an SM (384 threads x 168+ registers and ~226 KiB allow no second)
        ctiles = min(ctiles, _sm_count(a.device) // cluster)
    nvrtc.launch(kernel, grid=(ctiles * cluster,), block=(384,), shared_mem=shared,
                 args=(out, map_a, map_b, map_out, nvrtc.i32(m), nvrtc.i32(n), nvrtc.i32(k)))
    return True


def _out_map(out):
    """WG_TMA_STORE: out's tensor map (boxes of 64 rows x 64 columns, 128-byte swizzle: one consumer warpgroup's
    64 x 64 block of the shared tile), or None (the kernel stores from registers) when TMA cannot address out's rows
    (_rows16: n not a multiple of 8 elements) or the option is off."""
    if not CONFIG["WG_TMA_STORE"] or _rows16(out) is None:
        return None
    try:
        return nvrtc.tensor_map(out, (64, 64), swizzle=128)
    except nvrtc.TensorMapError as exc:
        nvrtc.warn_once(f"matmul WG_TMA_STORE falls back to direct stores: {exc}")
        return None


def _launch_wmma(out, a, b):
    m, k = a.shape
    n = b.shape[1]
    ac, bc = a.contiguous(), b.contiguous()
    vec = 16 // a.element_size()
    aligned = k % vec == 0 and n % vec == 0 and ac.data_ptr() % 16 == 0 and bc.data_ptr() % 16 == 0
    kernel = _kernel(f"matmul_{_SUFFIX[a.dtype]}_{'v' if aligned else 's'}", _defines(cluster=1))
    threads = _WMMA["WMMA_WARPS_M"] * _WMMA["WMMA_WARPS_N"] * 32
    grid = (math.ceil(n / _WMMA["WMMA_BN"]), math.ceil(m / _WMMA["WMMA_BM"]))
    nvrtc.launch(kernel, grid=grid, block=(threads,), args=(out, ac, bc, nvrtc.i32(m), nvrtc.i32(n), nvrtc.i32(k)))


def kernel_fn(a, b):
    m, k = a.shape
    n = b.shape[1]
    if b.dtype != a.dtype:
        b = b.to(a.dtype)
    out = torch.empty((m, n), dtype=a.dtype, device=a.device)
    if m == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_()
    if a.dtype == torch.float32 or CONFIG["VARIANT"] == "wmma":
        _launch_wmma(out, a, b)
        return out
    operands = (*_operands(a, b), m, n, k)  # rows padded once, whichever kernel runs
    if CONFIG["VARIANT"] != "wgmma" or not _launch_wgmma(out, *operands):
        _launch_mma(out, *operands)  # "mma", or "wgmma" off sm_90 / without tensor maps
    return out
