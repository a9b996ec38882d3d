"""Flash attention (causal or not, grouped-query heads), CUDA C++ (NVRTC): wgmma on Hopper, else mma.sync.

bf16/fp16 (VARIANT "mma"): one block handles BLOCK_M = 16*WARPS query rows of one (batch, head); each
warp owns 16 rows. The Q tile is copied to shared memory once and kept as m16n8k16 A-fragments in
registers (ldmatrix). K and V blocks of BLOCK_N keys stream through a two-stage cp.async pipeline in
dynamic shared memory (rows padded by 16 bytes, so ldmatrix reads are bank-conflict free). Per block:
S = Q K^T with `mma.sync.m16n8k16` (ldmatrix of K rows is the "col" B operand), an exp2 online softmax
on the S accumulators in registers (row max and sum across the 4 lanes of a quad), P converted to
16-bit A-fragments straight from the accumulators, O += P V (ldmatrix.trans of V). Causal: key blocks
right of the diagonal are never loaded, warps skip blocks entirely above their rows, and only blocks
that cross the diagonal or the sequence end are masked. Ragged S: K/V rows past the end are
zero-filled and their scores set to -inf. Strided (non-contiguous) q/k/v are read in place when
every row starts 16-byte aligned; otherwise they are copied first.
fp32 (and VARIANT "wmma"): the earlier WMMA kernel (fp32 as 3xTF32: three tf32 products keep fp32
accuracy; scores staged through 48 KiB of static shared memory). HEAD_DIM in {16, 32, 64, 128}.
VARIANT "wgmma" (the default; sm_90a, H100 / H200): FA3-style, warp-specialised -- a producer warpgroup TMA-loads
Q once and K/V tiles into an mbarrier ring, two consumer warpgroups (64 query rows each) run S = Q K^T as wgmma
from shared memory, the online softmax on the accumulator fragments, and O += P V as wgmma with P straight from
registers (details at namespace fa3). It needs fp16/bf16, D in {64, 128}, S % 128 == 0, contiguous q/k/v,
sm_scale > 0, an sm_90 device and tensor maps (cuda.bindings); otherwise "mma" runs (fp32: WMMA).
"""

import math

import torch

from autokernel_ci import nvrtc

KERNEL_TYPE = "flash_attention"
BACKEND = "cuda"
# VARIANT "mma": the FA2-style kernel for fp16/bf16 (fp32 always takes the WMMA kernel), the default's fallback
# where "wgmma" cannot run; "wmma": the earlier
# WMMA kernel for every dtype (fallback). WARPS: 16 query rows per warp, so BLOCK_M = 16 * WARPS.
# BLOCK_N: keys per pipeline stage. At D=128, BLOCK_N=64 a lane holds 32 fp32 scores + 64 fp32 outputs
# + 32 registers of Q fragments (128 live values before addresses), and the block uses
# max(4 * BLOCK_N, 2 * BLOCK_N + BLOCK_M) * 136 * 2 bytes of shared memory (Q shares stage 1): 69,632 B at the
# default (the 228 KiB of an SM hold three; registers decide), 139,264 B at the 8 x 128 corner (< 227 KiB).
# MIN_BLOCKS: __launch_bounds__ minimum blocks per SM (register cap 65,536 / (32 * WARPS * MIN_BLOCKS)). 1 leaves
# ptxas free: 210 registers at D=128, BLOCK_N=64, no spill (two 4-warp blocks per SM); 3 caps 4 warps at 168
# registers: 60 B of spill at BLOCK_N=64, none at BLOCK_N=32 (three blocks, 12 warps per SM). nvcc 13.0 numbers.
# Default MIN_BLOCKS 3 despite that spill: measured on the H200 at 2x32x4096x128 bf16 it was the fastest point
# (1,280 / 2,475 / 1,293 us causal / not causal / GQA, against 1,352 / 2,565 / 1,372 us with MIN_BLOCKS 1).
# VARIANT "wgmma" (sm_90a: H100 / H200): the FA3-style TMA + wgmma kernel (see its comment in CUDA_SOURCE); it runs
# for fp16 / bf16, D in {64, 128}, S % 128 == 0, contiguous q, k, v (after the dtype cast), sm_scale > 0 on an sm_90
# device with cuda.bindings (tensor maps); anything else takes "mma" (fp32 the WMMA kernel). WG_BLOCK_N: keys a
# stage (64 or 128); WG_STAGES: K/V ring depth, clamped to what fits 227 KiB (3 at D=128, BN=128: 226 KiB).
# WG_PIPELINE: 0 serial, 1 a block's Q K^T in flight with the previous block's P V (its softmax too only with
# WG_PIN 1: see fa3), 2 that plus ping-pong turns of the two consumer warpgroups. Measured on the H200 (bf16,
# 2x32x4096x128, causal / not causal / GQA, SDPA in the same process; round `pipeline`, every point correct on every
# shape set): 2 with 3 stages 529.7 / 952.2 / 516.2 us (0.93 / 0.96 / 1.01x SDPA), the serial 2-stage kernel
# 534.1 / 1,030.6 / 570.5 us, 1 with 3 stages 534.3 / 997.7 / 557.1 us; with 2 stages the overlap is slower
# (643-707 / 1,130-1,231 us: the ring holds the two blocks in flight and the next load waits). Earlier: "mma"
# 1,276 / 2,434 / 1,308 us. Round `pipeline2`: the default passed every shape set in bf16 and fp16 and `verify`;
# 518.6 / 950.6 / 523.8 us bf16 (1.03 / 0.96 / 1.01x SDPA), 515.4 / 988.2 / 539.2 us fp16. WG_PIN 1 keeps the
# softmax before the P V wait in SASS (see fa3): 528.6 / 924.2 / 515.5 us bf16 (+3% not causal, -2% causal; fp16
# -5% causal), inside the spread, so off. WG_PIN acts only with WG_PIPELINE >= 1 (with 0 it builds the same kernel).
# WG_CONSUMER_COPIES 2: one consumer loop per warpgroup with its index a constant (uniform wgmma descriptors, no score
# zeroing; see fa3::consume). Round `ncu_flash_nc` (bf16, two runs each, alternating): with the ping-pong default
# 534.9-545.5 / 972.0-981.0 / 543.1-547.4 us against 521.5-523.0 / 937.6-938.4 / 520.5-524.4 us for one shared loop
# (-2 to -5%: the two loops' code takes turns on the same SM); with WG_PIPELINE 1 + WG_PIN 1 546.0 / 962.1 / 539.6 us
# against 573.1 / 1,024.4 / 565.3 (+5-6%), still behind the default. So 1.
# WG_PERSISTENT: 1 runs not-causal calls on one block an SM (a 1-d grid of min(tiles, SMs)) that walks the (query
# block, batch x head) tiles in strides of the grid, query blocks fastest (a wave shares a few heads' K/V in L2); its
# K/V ring runs on from one tile to the next and the next tile's Q is loaded as soon as both consumers' last
# S = Q K^T of this tile is done, so the next tile's copies overlap this one's last P V and its stores (cuDNN's
# not-causal kernel is persistent: 132 blocks). Causal tiles differ in length (1..S/128 key blocks), so a static
# walk would leave blocks idle at the end: 1 keeps one block a tile (the other build) for them; 2 walks causal calls
# too. 0: one block a tile (a 2-d grid). H200, bf16, 2x32x4096x128, alternating in one process (rounds `persist`,
# `unmasked`, `final13`): not causal 909.6 / 914.8 us with the walk against 916.6 / 922.0 us without (with the
# unmasked loop below; 934-944 against 955-962 us before it); causal 531.8 / 532.1 us walking against 524.0 / 530.5,
# GQA 530.6 / 535.1 against 521.1 / 532.7, so 1. The walk build's tile index divides by the query blocks, which
# leaves WG_CONSUMER_COPIES 2's descriptors in vector registers there.
# The pipelined consumer runs its loop twice, over the blocks no causal mask touches, then over the diagonal's
# (fa3::consume): a run-time mask test in one loop became 130 selects and compares in each block's 672 SASS
# instructions (519 without). bf16 against the file before (8b6b3dc), alternating: not causal 913.8-940.6 us ->
# 894.9-922.0 us (+2-3%), causal and GQA +0-2%; fp16 not causal 964.5 / 967.1 -> 939.9 / 940.0 us; ncu not causal
# 813.1 us (890.4 before; cuDNN's SDPA kernel 815.6 us, the Gluon one 834.3 us). WG_PIN 1 on that loop: inside the
# spread (round `pin13`, three alternating pairs), so still 0.
CONFIG = {"VARIANT": "wgmma", "WARPS": 4, "BLOCK_N": 64, "MIN_BLOCKS": 3, "WG_BLOCK_N": 128, "WG_STAGES": 3,
          "WG_PIPELINE": 2, "WG_PIN": 0, "WG_CONSUMER_COPIES": 1, "WG_PERSISTENT": 1}
SEARCH_SPACE = {"VARIANT": ["mma", "wmma", "wgmma"], "WARPS": [2, 4, 8], "BLOCK_N": [32, 64, 128],
                "MIN_BLOCKS": [1, 2, 3], "WG_BLOCK_N": [64, 128], "WG_STAGES": [2, 3, 4],
                "WG_PIPELINE": [0, 1, 2], "WG_PIN": [0, 1], "WG_CONSUMER_COPIES": [1, 2], "WG_PERSISTENT": [0, 1, 2]}
# Knobs that act only under some values of others (the search agent skips moves that rebuild one kernel): the WG_
# knobs only in the wgmma kernel, WG_PIN only with a pipelined schedule. WARPS / BLOCK_N / MIN_BLOCKS are not scoped:
# the wgmma variant falls back to the mma kernel off sm_90.
KNOB_SCOPE = {"WG_BLOCK_N": {"VARIANT": ["wgmma"]}, "WG_STAGES": {"VARIANT": ["wgmma"]},
              "WG_PIPELINE": {"VARIANT": ["wgmma"]}, "WG_PIN": {"VARIANT": ["wgmma"], "WG_PIPELINE": [1, 2]},
              "WG_CONSUMER_COPIES": {"VARIANT": ["wgmma"]}, "WG_PERSISTENT": {"VARIANT": ["wgmma"]}}

MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y
HEAD_DIMS = (16, 32, 64, 128)  # the spec's head dims: multiples of 16 (one k-step of m16n8k16), at most 128
# The WMMA kernel keeps its own tiles: its 48 KiB static shared memory holds 4 warps x 32 keys at D=128
# fp32 (46,080 B), so it does not follow WARPS / BLOCK_N.
WMMA_TILES = {"WMMA_WARPS": 4, "WMMA_BLOCK_N": 32}

# nvrtc.PRELUDE (autokernel_ci/prelude.cuh) comes first: <cuda_fp16.h>, <cuda_bf16.h>, INFINITY, to_float(x),
# from_float<T>(f), Vec<T, N> (one aligned 4/8/16-byte access), warp_sum(v), group_sum<WPR>(v, red).
# Compiler error lines count from the r""" line below (the prelude ends with #line 1).
CUDA_SOURCE = nvrtc.PRELUDE + r"""
#include <mma.h>

// ================= FA2-style kernel for fp16 / bf16: mma.sync.m16n8k16, fragments in registers =================
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"), with
// g = lane >> 2 (groupID) and t = lane & 3 (threadID_in_group); each .b32 register holds two 16-bit values,
// the lower column (or k) in the low half:
//   A 16x16 (row-major): reg0 = A[g][2t, 2t+1], reg1 = A[g+8][2t, 2t+1], reg2 = A[g][2t+8, +9], reg3 = A[g+8][2t+8, +9]
//   B 16x8  ("col"):     reg0 = B[2t, 2t+1][g], reg1 = B[2t+8, 2t+9][g]
//   C 16x8  (fp32):      c0, c1 = C[g][2t, 2t+1], c2, c3 = C[g+8][2t, 2t+1]
// ldmatrix.x4: lanes 8i..8i+7 give the row addresses of 8x8 matrix i, register i gets matrix i with lane l holding
// row l/4, columns 2(l%4), +1; with .trans it holds column l/4, rows 2(l%4), +1.
namespace fa2 {
constexpr int D = HEAD_DIM;
constexpr int BM = 16 * WARPS;  // query rows per block, 16 per warp
constexpr int BN = BLOCK_N;     // keys per pipeline stage
constexpr int THREADS = 32 * WARPS;
// Shared rows are padded by 8 elements (16 bytes): a row is (D + 8) * 2 bytes = 4 (mod 32) banks apart from
// the next for every D in {16, 32, 64, 128}, so the 8 rows of one ldmatrix 8x8 matrix hit 8 distinct 4-bank
// groups (conflict-free), and every row still starts 16-byte aligned for cp.async and ldmatrix.
constexpr int LD = D + 8;
constexpr int KV_TILE = BN * LD;  // elements of one K or V stage
static_assert(D % 16 == 0 && D <= 128, "HEAD_DIM must be a multiple of 16 and at most 128");
static_assert(BN % 16 == 0, "BLOCK_N must be a multiple of 16 (two n8 score tiles per ldmatrix.x4 of K)");

// Two fp32 values packed as one 16-bit pair (low = lo): P re-enters mma16816 as A fragments.
template <typename T> struct Op;
template <> struct Op<__half> {
    static __device__ __forceinline__ unsigned pack(float lo, float hi) {
        __half2 v = __floats2half2_rn(lo, hi);
        return *reinterpret_cast<unsigned*>(&v);
    }
};
template <> struct Op<__nv_bfloat16> {
    static __device__ __forceinline__ unsigned pack(float lo, float hi) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<unsigned*>(&v);
    }
};

// ROWS rows of D elements from src (row stride in elements) into a padded shared tile, 16 bytes per cp.async;
// rows at or past seq are zero-filled (their source address is the valid row 0 and no byte of it is read).
template <int ROWS, typename T>
__device__ __forceinline__ void load_tile(T* dst, const T* src, long long row_stride, int row0, int seq) {
    constexpr int CHUNKS = D / 8;
#pragma unroll
    for (int i = threadIdx.x; i < ROWS * CHUNKS; i += THREADS) {
        const int r = i / CHUNKS, c = (i % CHUNKS) * 8;
        const bool valid = row0 + r < seq;
        cp_async16(smem_addr(dst + r * LD + c), valid ? src + (long long)(row0 + r) * row_stride + c : src,
                   valid ? 16 : 0);
    }
}

template <typename T>
__device__ __forceinline__ void attention(T* __restrict__ out, const T* __restrict__ q, const T* __restrict__ k,
                                          const T* __restrict__ v, int heads, int kv_heads, int seq, int causal,
                                          float scale_log2, long long qsb, long long qsh, long long qss,
                                          long long ksb, long long ksh, long long kss, long long vsb, long long vsh,
                                          long long vss) {
    // Dynamic shared memory: stage 0 K, V and stage 1 K, V, each [BN][LD]. The Q tile [BM][LD] sits on stage 1
    // (and past it when BM > 2 BN): it is read into registers before stage 1 is first filled, which saves
    // BM * LD * 2 bytes (17 KiB at 4 warps, D=128) and lets 3 blocks share an SM where registers allow.
    extern __shared__ __align__(16) unsigned char smem[];
    T* KVs = reinterpret_cast<T*>(smem);
    T* Qs = KVs + 2 * KV_TILE;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    // Causal blocks get more work the further down they sit: launch those first (shorter tail).
    const int mblock = causal ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int q0 = mblock * BM, qw = q0 + warp * 16;  // first row of the block, of this warp
    const int bh = blockIdx.y, b = bh / heads, h = bh % heads, hk = h / (heads / kv_heads);
    const T* qh = q + b * qsb + h * qsh;
    const T* kh = k + b * ksb + hk * ksh;
    const T* vh = v + b * vsb + hk * vsh;
    const int kend = causal ? min(seq, q0 + BM) : seq;  // causal: no key right of the block's last row
    const int nblocks = (kend + BN - 1) / BN;           // >= 1: q0 < seq, so kend >= 1

    // Prologue: Q in its own group (on stage 1), then K/V block 0 into stage 0.
    load_tile<BM>(Qs, qh, qss, q0, seq);
    cp_async_commit();
    load_tile<BN>(KVs, kh, kss, 0, seq);
    load_tile<BN>(KVs + KV_TILE, vh, vss, 0, seq);
    cp_async_commit();
    cp_async_wait<1>();  // Q has landed (K/V block 0 may still be in flight)
    __syncthreads();

    // This warp's 16 x D slice of Q as A-fragments, kept for the whole loop. ldmatrix.x4 per 16-column chunk:
    // lane l addresses row l & 15, column 8 * (l >> 4), so matrices 0..3 are (rows 0-7, cols 0-7),
    // (rows 8-15, cols 0-7), (rows 0-7, cols 8-15), (rows 8-15, cols 8-15) = A regs 0..3.
    unsigned qa[D / 16][4];
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc)
        ldsm_x4(qa[kc], smem_addr(Qs + (warp * 16 + (lane & 15)) * LD + kc * 16 + (lane >> 4) * 8));
    __syncthreads();  // every warp holds its Q fragments: iteration 0 may now refill stage 1

    float o[D / 8][4];  // O tile n = dt: o[dt][0..1] row g, o[dt][2..3] row g + 8, columns 8 dt + 2t, +1
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[dt][e] = 0.f;
    // Running max (log2 units, quad-uniform) and this lane's partial row sum for rows g and g + 8.
    float m_row[2] = {-INFINITY, -INFINITY}, l_row[2] = {0.f, 0.f};

    for (int j = 0; j < nblocks; ++j) {
        if (j + 1 < nblocks) {  // prefetch block j + 1 into the other stage (last read in iteration j - 1,
                                // or by the Q fragment loads when j = 0)
            T* next = KVs + ((j + 1) & 1) * 2 * KV_TILE;
            load_tile<BN>(next, kh, kss, (j + 1) * BN, seq);
            load_tile<BN>(next + KV_TILE, vh, vss, (j + 1) * BN, seq);
            cp_async_commit();
            cp_async_wait<1>();  // everything but block j + 1: block j has landed
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();  // block j is visible to every warp

        const int n0 = j * BN;
        const T* Kt = KVs + (j & 1) * 2 * KV_TILE;
        const T* Vt = Kt + KV_TILE;
        // Causal: a block entirely right of this warp's last row adds nothing (warp-uniform branch). When it
        // is taken, n0 <= qw (both multiples of 16), so every row of the warp sees key n0 (< kend <= seq).
        if (!causal || n0 <= qw + 15) {
            // S = Q K^T: s[nt] is the 16 x 8 tile of keys n0 + 8 nt .. + 7. ldmatrix.x4 of K rows (K row-major
            // is B = K^T in "col" layout): lane l addresses key 16 np + (l & 7) + 8 (l >> 4), column
            // 16 kc + 8 ((l >> 3) & 1), so registers 0, 1 = B regs of tile 2 np and 2, 3 = of tile 2 np + 1.
            float s[BN / 8][4];
#pragma unroll
            for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[nt][e] = 0.f;
#pragma unroll
            for (int kc = 0; kc < D / 16; ++kc) {
#pragma unroll
                for (int np = 0; np < BN / 16; ++np) {
                    unsigned kb[4];
                    ldsm_x4(kb, smem_addr(Kt + (np * 16 + (lane & 7) + (lane >> 4) * 8) * LD + kc * 16 +
                                          ((lane >> 3) & 1) * 8));
                    mma16816<T>(s[2 * np], qa[kc], kb[0], kb[1]);
                    mma16816<T>(s[2 * np + 1], qa[kc], kb[2], kb[3]);
                }
            }

            // Scores in log2 units; -inf past the sequence end and right of the diagonal (only blocks that
            // reach the end or cross this warp's diagonal need the test).
            const bool edge = n0 + BN > seq || (causal && n0 + BN - 1 > qw);
#pragma unroll
            for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float x = s[nt][e] * scale_log2;
                    if (edge) {
                        const int key = n0 + nt * 8 + 2 * t + (e & 1), row = qw + g + 8 * (e >> 1);
                        if (key >= seq || (causal && key > row)) x = -INFINITY;
                    }
                    s[nt][e] = x;
                }

            // Online softmax: rows g (e = 0, 1) and g + 8 (e = 2, 3); a row's 8 columns of a tile sit in the
            // 4 lanes of a quad, so its max is reduced with xor 1 and xor 2.
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int nt = 0; nt < BN / 8; ++nt) {
                mx[0] = fmaxf(mx[0], fmaxf(s[nt][0], s[nt][1]));
                mx[1] = fmaxf(mx[1], fmaxf(s[nt][2], s[nt][3]));
            }
            float mu[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
                mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
                const float m_new = fmaxf(m_row[r], mx[r]);
                // A row with no visible key yet keeps max -inf: subtract 0 instead, so exp2(-inf) = 0 and
                // never inf - inf = NaN.
                mu[r] = m_new == -INFINITY ? 0.f : m_new;
                const float alpha = fast_exp2(m_row[r] - mu[r]);  // 0 on the first visible block, else <= 1
                m_row[r] = m_new;
                l_row[r] *= alpha;
#pragma unroll
                for (int dt = 0; dt < D / 8; ++dt) {
                    o[dt][2 * r] *= alpha;
                    o[dt][2 * r + 1] *= alpha;
                }
            }
#pragma unroll
            for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float p = fast_exp2(s[nt][e] - mu[e >> 1]);
                    s[nt][e] = p;
                    l_row[e >> 1] += p;
                }

            // O += P V. The C tiles 2 kk, 2 kk + 1 of S are exactly the A fragment of P for keys
            // 16 kk .. 16 kk + 15: reg0 = tile 2kk (c0, c1), reg1 = tile 2kk (c2, c3), reg2 = tile 2kk+1 (c0, c1),
            // reg3 = tile 2kk+1 (c2, c3). V [key][d] row-major is B = V (k = key, n = d) in "row" layout, so it
            // goes through ldmatrix.trans: lane l addresses key 16 kk + (l & 7) + 8 ((l >> 3) & 1), column
            // 16 dp + 8 (l >> 4): registers 0, 1 = B regs of O tile 2 dp and 2, 3 = of O tile 2 dp + 1.
#pragma unroll
            for (int kk = 0; kk < BN / 16; ++kk) {
                const unsigned pa[4] = {Op<T>::pack(s[2 * kk][0], s[2 * kk][1]),
                                        Op<T>::pack(s[2 * kk][2], s[2 * kk][3]),
                                        Op<T>::pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                        Op<T>::pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
                for (int dp = 0; dp < D / 16; ++dp) {
                    unsigned vb[4];
                    ldsm_x4_trans(vb, smem_addr(Vt + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + dp * 16 +
                                                (lane >> 4) * 8));
                    mma16816<T>(o[2 * dp], pa, vb[0], vb[1]);
                    mma16816<T>(o[2 * dp + 1], pa, vb[2], vb[3]);
                }
            }
        }
        __syncthreads();  // every warp is done with stage j & 1 before iteration j + 1 refills it
    }

    // O / l, rows past the sequence end not written. out is contiguous [B, H, S, D].
    T* oh = out + (long long)bh * seq * D;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = l_row[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv = l > 0.f ? 1.f / l : 0.f;
        const int row = qw + g + 8 * r;
        if (row < seq) {
#pragma unroll
            for (int dt = 0; dt < D / 8; ++dt)
                *reinterpret_cast<unsigned*>(oh + (long long)row * D + dt * 8 + 2 * t) =
                    Op<T>::pack(o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
        }
    }
}
}  // namespace fa2

#define FA2_KERNEL(SUFFIX, T)                                                                                  \
    extern "C" __global__ void __launch_bounds__(fa2::THREADS, MIN_BLOCKS) flash_attention_mma_##SUFFIX(       \
        T* __restrict__ out, const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,        \
        int heads, int kv_heads, int seq, int causal, float scale_log2, long long qsb, long long qsh,           \
        long long qss, long long ksb, long long ksh, long long kss, long long vsb, long long vsh,               \
        long long vss) {                                                                                       \
        fa2::attention<T>(out, q, k, v, heads, kv_heads, seq, causal, scale_log2, qsb, qsh, qss, ksb, ksh, kss, \
                          vsb, vsh, vss);                                                                      \
    }
FA2_KERNEL(f16, __half)
FA2_KERNEL(bf16, __nv_bfloat16)

// ================= VARIANT "wgmma": FA3-style forward for Hopper (sm_90a): TMA + mbarrier ring + wgmma ==========
// Defines: HEAD_DIM (64 or 128), WG_BLOCK_N (keys a stage: 64 or 128), WG_STAGES (K/V ring depth), WG_PIPELINE (0:
// each block's GEMMs and softmax in turn; 1: a block's Q K^T and the previous block's P V in flight together (the
// softmax under P V with WG_PIN 1); 2: 1 plus ping-pong, the two consumer warpgroups taking turns on the tensor
// cores), WG_PIN (1: keep the softmax before the P V wait, see the consumer loop).
// One block = 128 query rows of one (batch, head), 384 threads = 3 warpgroups (as matmul's Part 3):
//   warpgroup 0, producer (setmaxnreg.dec 40): one thread TMA-loads the Q tile once (barrier q_full), then the K and V
//     tiles of every key block into a WG_STAGES ring (full[s]: one arrive.expect_tx of both tiles' bytes; empty[s]:
//     one arrival per consumer warp when its wgmma no longer read the stage);
//   warpgroups 1, 2, consumers (setmaxnreg.inc 232): 64 query rows each. Per key block:
//     S[64 x BN] = Q K^T: D/16 wgmma.m64n{BN}k16, A = Q and B = K both from shared memory, K-major (D contiguous);
//     online softmax on the accumulator fragment (each thread holds rows r and r + 8, quad shuffles for max / sum);
//     O[64 x D] += P V: BN/16 wgmma.m64n{D}k16 with A = P in registers (bf16/f16 pairs packed straight from the S
//     accumulators, see WgmmaRS in nvrtc.PRELUDE) and B = V from shared memory, N-major (transpose bit).
// Shared memory (from a 1024-byte aligned base; 128-byte swizzle, each 64-column (128-byte) slice one TMA box):
//   Q: D/64 boxes of [128 rows][128 B] (16 KiB each); stage s: K at Q_BYTES + 2 s KV_BYTES, V after it, each D/64
//   boxes of [BN rows][128 B]; then the mbarriers q_full, full[STAGES], empty[STAGES], q_empty.
// Descriptors (LBO / SBO bytes; the canonical 128B-swizzle layouts, checked on the CPU in test_cuda_flash_layout.py):
//   Q (A, K-major): wg_desc(Q + (wg - 1) 64 * 128 + (ks / 4) * 16384 + 32 (ks % 4), 16, 1024), k step ks = 0..D/16-1
//   K (B, K-major): wg_desc(K + (ks / 4) * BN * 128 + 32 (ks % 4), 16, 1024)
//   V (B, N-major, trans-b 1): k step kk = keys 16 kk..: wg_desc(V + 2048 kk, BN * 128, 1024) -- 16 key rows are
//     2048 bytes, the 64-column D boxes lie BN * 128 bytes apart (LBO), 8-row groups 1024 apart (SBO).
// WG_PERSISTENT: a block walks tiles first, first + gridDim.x, ...; the ring's counter and q_full's phase run on
// across them, and q_empty (one arrival a consumer warp, after its last S = Q K^T of a tile) lets the producer load the
// next tile's Q after that tile's first ring-full of K/V.
// Requirements (the launcher checks them, else VARIANT "mma" runs): S % 128 == 0 (no ragged tile: the 2-d tensor maps
// span all heads, so rows past S would be the next head's), contiguous q, k, v, sm_scale > 0 (the row max is taken
// on raw scores and scaled once).
namespace fa3 {
constexpr int D = HEAD_DIM;
constexpr int BM = 128;
constexpr int BN = WG_BLOCK_N;
constexpr int STAGES = WG_STAGES;
constexpr int THREADS = 384;
constexpr int Q_CHUNK = BM * 128;   // one 64-column box of Q
constexpr int KV_CHUNK = BN * 128;  // one 64-column box of K or V
constexpr int Q_BYTES = BM * D * 2;
constexpr int KV_BYTES = BN * D * 2;
constexpr int CONSUMER_WARPS = 8;

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Consumer warpgroup WG_INDEX (1: query rows q0 .. q0 + 63, 2: q0 + 64 .. q0 + 127; 0: read from threadIdx) of the
// block set up by attention() below: its shared memory (Q at base, the K/V ring at kv0, the mbarriers at bars) and
// tile.
// ring: key blocks this block consumed before this tile (the stage of block j is (ring + j) % STAGES and its phase
// ((ring + j) / STAGES) & 1); tile: tiles done before this one (q_full's phase). Both 0 without WG_PERSISTENT.
template <int WG_INDEX, typename T>
__device__ __forceinline__ void consume(T* __restrict__ out, unsigned base, unsigned kv0, unsigned bars, int q0,
                                        int bh, int seq, int causal, int nblocks, float scale_log2, int ring,
                                        int tile) {
    const int wg = WG_INDEX ? WG_INDEX : (int)(threadIdx.x / 128);
    const unsigned q_full = bars, q_empty = bars + 8 * (1 + 2 * STAGES);
    const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
    const int row_base = q0 + (wg - 1) * 64;
    const int r0 = row_base + warp * 16 + (lane >> 2);  // this thread's rows: r0 (h = 0) and r0 + 8 (h = 1)
    // Accumulator fragment (m64nNk16): register i holds row r0 + 8 ((i / 2) % 2), column 8 (i / 4) + 2 (lane % 4)
    // + (i % 2) of the warpgroup's 64 x N result.
    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    float m_row[2] = {-INFINITY, -INFINITY}, l_row[2] = {0.f, 0.f};  // running max (log2 units), partial sums
    const unsigned q_wg = base + (wg - 1) * 64 * 128;  // this warpgroup's 64 rows inside each Q box
    const unsigned long long dq = wg_desc(q_wg, 16, 1024);
    mbar_wait(q_full, tile & 1);

    // The steps of one key block j (ring stage j % STAGES: K at kv_stage(j), V KV_BYTES after it).
    float sc[BN / 2];       // scores of the block, then its probabilities
    unsigned pa[BN / 16][4];  // P as wgmma A fragments (16-bit pairs)
    float alpha[2];          // the rescale of the running output for this thread's two rows
    auto kv_stage = [&](int j) { return kv0 + ((ring + j) % STAGES) * 2 * KV_BYTES; };
    auto wait_full = [&](int j) { mbar_wait(bars + 8 * (1 + (ring + j) % STAGES), ((ring + j) / STAGES) & 1); };
    auto issue_s = [&](int j) {  // S = Q K_j^T, asynchronous (one committed group)
        wait_full(j);
        const unsigned long long dk = wg_desc(kv_stage(j), 16, 1024);
#if WG_CONSUMER_COPIES == 1
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) sc[i] = 0.f;
#endif
        wg_fence_acc(sc);
        wg_fence();
#pragma unroll
        for (int kc = 0; kc < D / 16; ++kc) {
            const unsigned long long da = desc_plus(dq, (kc / 4) * Q_CHUNK + 32 * (kc % 4));
            const unsigned long long db = desc_plus(dk, (kc / 4) * KV_CHUNK + 32 * (kc % 4));
            Wgmma<T, BN, 0>::run(sc, da, db, WG_CONSUMER_COPIES == 2 ? kc > 0 : 1);
        }
        wg_commit();
    };
    // sc: scores -> probabilities; m_row, l_row, alpha updated. mask (a literal at every call, so the inlined code
    // keeps one branch): 0 no causal mask (the steady loop), 1 the mask (blocks that reach right of this warpgroup's
    // first row), 2 decided here. A run-time test in the loop becomes selects that ptxas runs on every block (130 of
    // 672 SASS instructions a block). (No generic lambda: CUDA 13.0's NVRTC takes `auto` parameters for host code.)
    auto softmax = [&](int j, int mask) {
        const int n0 = j * BN;
        if (mask == 1 || (mask == 2 && causal && n0 + BN - 1 > row_base)) {
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) {
                const int key = n0 + 8 * (i / 4) + 2 * (lane & 3) + (i & 1);
                if (key > r0 + 8 * ((i / 2) % 2)) sc[i] = -INFINITY;
            }
        }
        // Online softmax: a row's BN columns sit in the 4 lanes of a quad (xor 1, xor 2).
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) mx[(i / 2) % 2] = fmaxf(mx[(i / 2) % 2], sc[i]);
        float mu[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
            const float m_new = fmaxf(m_row[r], mx[r] * scale_log2);  // scale_log2 > 0 (launcher)
            mu[r] = m_new == -INFINITY ? 0.f : m_new;  // no visible key yet: never inf - inf
            alpha[r] = fast_exp2(m_row[r] - mu[r]);
            m_row[r] = m_new;
            l_row[r] *= alpha[r];
        }
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) {
            const float p = fast_exp2(fmaf(sc[i], scale_log2, -mu[(i / 2) % 2]));
            sc[i] = p;
            l_row[(i / 2) % 2] += p;
        }
    };
    auto rescale = [&]() {
#pragma unroll
        for (int i = 0; i < D / 2; ++i) o[i] *= alpha[(i / 2) % 2];
    };
    // P as wgmma A fragments: keys 16 kk .. 16 kk + 15 are accumulator registers 8 kk .. 8 kk + 7, whose
    // (row, column) pattern is exactly the A fragment's elements 0..7 (PTX wgmma-64N16-A / -D).
    auto pack = [&]() {
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
            for (int e = 0; e < 4; ++e) pa[kk][e] = fa2::Op<T>::pack(sc[8 * kk + 2 * e], sc[8 * kk + 2 * e + 1]);
    };
    auto issue_pv = [&](int j) {  // O += P V_j, asynchronous (one committed group); reads pa until it completes
        const unsigned long long dv = wg_desc(kv_stage(j) + KV_BYTES, KV_CHUNK, 1024);
        wg_fence_acc(o);
        wg_fence();
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) WgmmaRS<T, D, 1>::run(o, pa[kk], desc_plus(dv, 2048 * kk), 1);
        wg_commit();
    };
    auto pv_done = [&]() {  // after wg_wait: o may be read, pa rewritten (the asm keeps pa live until here)
        wg_fence_acc(o);
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
            for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(pa[kk][e])::"memory");
    };
    auto release = [&](int j) {  // this warp no longer reads block j's stage
        __syncwarp();
        if (lane == 0) mbar_arrive(bars + 8 * (1 + STAGES + (ring + j) % STAGES));
    };
    // Every S = Q K^T of the tile is complete (Q is read by no wgmma any more): the producer may load the next
    // tile's Q (WG_PERSISTENT) while this warpgroup finishes its last P V and stores its rows.
    auto release_q = [&]() {
        __syncwarp();
        if (lane == 0) mbar_arrive(q_empty);
    };

    // WG_PIPELINE 2, ping-pong: the two consumer warpgroups take turns issuing their tensor-core work (named
    // barriers 1 and 2: sync on mine, arrive on the other's), so one's softmax runs under the other's GEMMs.
    // Each warpgroup has my_blocks + 1 issue sections; warpgroup 2 opens warpgroup 1's first turn and skips its
    // arrive after its last section, so every barrier phase gets exactly 256 threads.
    auto my_turn = [&]() {
        if (WG_PIPELINE == 2) asm volatile("bar.sync %0, 256;\n" ::"r"(wg) : "memory");
    };
    auto their_turn = [&](bool last) {
        if (WG_PIPELINE == 2 && !(last && wg == 2)) asm volatile("bar.arrive %0, 256;\n" ::"r"(3 - wg) : "memory");
    };
    // Causal: blocks entirely right of this warpgroup's last row add nothing; they are a suffix (only BN 64 has
    // one: keys q0 + 64 .. q0 + 127 for warpgroup 1) and are released unread at the end. Ping-pong needs both
    // warpgroups to take the same number of turns: there warpgroup 1 computes that block (fully masked: p = 0).
    const int my_blocks = causal && WG_PIPELINE != 2 ? min(nblocks, (row_base + 63) / BN + 1) : nblocks;
#if WG_PIPELINE >= 1
    // FA3's intra-warpgroup overlap: block j's S = Q K^T and block j - 1's O += P V are in flight together, and
    // block j's softmax is placed before the wait for P V (in SASS only with WG_PIN 1, see below).
    if (WG_PIPELINE == 2 && wg == 2) asm volatile("bar.arrive 1, 256;\n" ::: "memory");  // warpgroup 1 first
    my_turn();
    issue_s(0);
    their_turn(false);
    wg_wait<0>();
    wg_fence_acc(sc);
    softmax(0, 2);  // o is still zero: nothing to rescale
    pack();
    // Blocks before `masked` need no causal mask in either warpgroup (all of them when not causal; S % 128 == 0, so no
    // ragged block): the loop runs twice, unmasked then masked, so neither tests a block at run time. The bound uses
    // the tile's first row q0, not this warpgroup's: warp-uniform to ptxas, so the descriptors stay in uniform
    // registers (warpgroup 2 masks one 64-key block it would not need to at BN 64: the mask is a no-op there).
    const int masked = causal ? min(my_blocks, max(1, q0 / BN)) : my_blocks;
    auto step = [&](int j, int mask) {
        my_turn();
        issue_s(j);
        issue_pv(j - 1);
        their_turn(false);
        wg_wait<1>();  // groups complete in order: S of block j is done, P V of block j - 1 may still run
        wg_fence_acc(sc);
        softmax(j, mask);
        // Pin the softmax before the wait: plain register math may otherwise be sunk below it. The fences alone
        // do not do it (ptxas 13.0 still schedules every exponential after the wait); WG_PIN 1 ends the softmax
        // with a branch that is never taken (alpha >= 0), which keeps its 66 MUFU.EX2 before the wait in SASS.
        wg_fence_acc(sc);
        wg_fence_acc(alpha);
        wg_fence_acc(l_row);
        if (WG_PIN && alpha[0] < 0.f) asm volatile("nanosleep.u32 0;\n" ::: "memory");
        wg_wait<0>();
        pv_done();
        rescale();
        release(j - 1);
        pack();
    };
    for (int j = 1; j < masked; ++j) step(j, 0);
    for (int j = masked; j < my_blocks; ++j) step(j, 1);
    release_q();  // the last wait (wait<1> in the loop, or wait<0> for block 0) completed the last S
    my_turn();
    issue_pv(my_blocks - 1);
    their_turn(true);
    wg_wait<0>();
    pv_done();
    release(my_blocks - 1);
#else
    for (int j = 0; j < my_blocks; ++j) {
        issue_s(j);
        wg_wait<0>();
        wg_fence_acc(sc);
        softmax(j, 2);
        rescale();
        pack();
        issue_pv(j);
        wg_wait<0>();
        pv_done();
        release(j);
    }
    release_q();
#endif
    for (int j = my_blocks; j < nblocks; ++j) {
        wait_full(j);
        release(j);
    }

    // O / l, in the output dtype; out is contiguous [B, H, S, D].
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = l_row[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv = l > 0.f ? 1.f / l : 0.f;
        const int row = r0 + 8 * r;
        if (row < seq) {
            T* orow = out + ((long long)bh * seq + row) * D + 2 * (lane & 3);
#pragma unroll
            for (int jj = 0; jj < D / 8; ++jj)
                *reinterpret_cast<unsigned*>(orow + 8 * jj) =
                    fa2::Op<T>::pack(o[4 * jj + 2 * r] * inv, o[4 * jj + 2 * r + 1] * inv);
        }
    }
}
#endif

template <typename T>
__device__ __forceinline__ void attention(T* __restrict__ out, const void* map_q, const void* map_k,
                                          const void* map_v, int heads, int kv_heads, int seq, int causal,
                                          float scale_log2, int tiles) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(D == 64 || D == 128, "wgmma flash attention: HEAD_DIM 64 or 128");
    static_assert(BN == 64 || BN == 128, "wgmma flash attention: WG_BLOCK_N 64 or 128");
    static_assert(STAGES >= 2, "the ring needs at least two stages");
    extern __shared__ __align__(128) unsigned char fa3_smem[];
    const unsigned base = (smem_addr(fa3_smem) + 1023u) & ~1023u;
    const unsigned kv0 = base + Q_BYTES;                     // stage s: K at kv0 + 2 s KV_BYTES, V after it
    const unsigned bars = kv0 + STAGES * 2 * KV_BYTES;       // q_full, full[s] = bars + 8 (1 + s), empty[s], q_empty
    const unsigned q_full = bars, q_empty = bars + 8 * (1 + 2 * STAGES);
    const int wg = threadIdx.x / 128;
    // Tiles t = (batch x head) * n_m + query block, query blocks fastest (a wave of blocks shares a few heads' K/V in
    // L2). Causal blocks further down have more key blocks: they come first (shorter tail), as in the mma kernel.
    // One tile a block (grid n_m x B*H), or WG_PERSISTENT: blocks t = blockIdx.x, + gridDim.x, ... of a 1-d grid.
    const int n_m = seq / BM;
#if WG_PERSISTENT
    const int first = blockIdx.x, step = gridDim.x;
#else
    const int first = blockIdx.y * n_m + blockIdx.x, step = tiles;  // one tile: the walk ends after `first`
#endif
    struct Tile { int q0, bh, kv_row, nblocks; };
    auto tile_at = [&](int t) {
#if WG_PERSISTENT
        const int m = t % n_m, bh = t / n_m;
#else
        const int m = blockIdx.x, bh = blockIdx.y;  // t = bh * n_m + m: no division (it would leave ptxas's uniform
                                                    // datapath: vector registers for the ring's descriptors)
#endif
        const int mblock = causal ? n_m - 1 - m : m;
        const int b = bh / heads, hk = bh % heads / (heads / kv_heads);
        const int q0 = mblock * BM, kend = causal ? min(seq, q0 + BM) : seq;
        return Tile{q0, bh, (b * kv_heads + hk) * seq, (kend + BN - 1) / BN};
    };

    if (threadIdx.x == 0) {
        mbar_init(q_full, 1);
        mbar_init(q_empty, CONSUMER_WARPS);                           // lane 0 of each consumer warp
#pragma unroll
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(bars + 8 * (1 + s), 1);                         // the producer's arrive.expect_tx
            mbar_init(bars + 8 * (1 + STAGES + s), CONSUMER_WARPS);   // lane 0 of each consumer warp
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();  // the only block-wide barrier

    if (wg == 0) {  // ---- producer ----
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (threadIdx.x == 0) {
            tensormap_acquire(map_q);
            tensormap_acquire(map_k);
            tensormap_acquire(map_v);
            auto load_q = [&](int q_row) {  // q_row: row of the [B*H*S, D] view
                mbar_arrive_expect_tx(q_full, Q_BYTES);
#pragma unroll
                for (int c = 0; c < D / 64; ++c) tma_load_2d(base + c * Q_CHUNK, map_q, q_full, 64 * c, q_row);
            };
            int it = 0, done = 0;  // key blocks loaded, tiles started: the ring's and q_full's phases
            for (int t = first; t < tiles; t += step, ++done) {
                const Tile tile = tile_at(t);
                const int q_row = tile.bh * seq + tile.q0;
                // The first tile's Q goes first. A later tile's waits until the consumers' last S = Q K^T of the
                // previous tile (q_empty), so it goes after this tile's first ring-full of K/V: those copies are in
                // flight while the consumers finish the previous tile.
                const int q_after = !WG_PERSISTENT || done == 0 ? -1 : min(tile.nblocks, STAGES) - 1;
                if (q_after < 0) load_q(q_row);
                for (int j = 0; j < tile.nblocks; ++j, ++it) {
                    const int s = it % STAGES;
                    // Stage s last held key block it - STAGES: wait for its ((it / STAGES) - 1)-th release.
                    if (it >= STAGES) mbar_wait(bars + 8 * (1 + STAGES + s), ((it / STAGES) - 1) & 1);
                    const unsigned full = bars + 8 * (1 + s);
                    const unsigned ks = kv0 + s * 2 * KV_BYTES, vs = ks + KV_BYTES;
                    const int kv_row = tile.kv_row + j * BN;  // row of the [B*Hkv*S, D] views
                    mbar_arrive_expect_tx(full, 2 * KV_BYTES);
#pragma unroll
                    for (int c = 0; c < D / 64; ++c) tma_load_2d(ks + c * KV_CHUNK, map_k, full, 64 * c, kv_row);
#pragma unroll
                    for (int c = 0; c < D / 64; ++c) tma_load_2d(vs + c * KV_CHUNK, map_v, full, 64 * c, kv_row);
                    if (j == q_after) {
                        mbar_wait(q_empty, (done - 1) & 1);
                        load_q(q_row);
                    }
                }
            }
        }
    } else {  // ---- consumers: warpgroup 1 rows q0 .. q0 + 63, warpgroup 2 rows q0 + 64 .. q0 + 127 ----
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        auto run = [&](int t, int ring, int done) {
            const Tile tile = tile_at(t);
#if WG_CONSUMER_COPIES == 2
            // One copy of the consumer per warpgroup, its index a template argument: every wgmma descriptor is then
            // warp-uniform to ptxas and built in uniform registers, and Q K^T overwrites the scores (scale-d 0)
            // instead of adding to zeroed ones: 635 SASS instructions a key block instead of 672 (nvcc 13.0, sm_90a,
            // BN 128, ping-pong), but twice the loop code (see CONFIG for what that did on the H200).
            if (wg == 1) consume<1>(out, base, kv0, bars, tile.q0, tile.bh, seq, causal, tile.nblocks, scale_log2,
                                    ring, done);
            else consume<2>(out, base, kv0, bars, tile.q0, tile.bh, seq, causal, tile.nblocks, scale_log2, ring,
                            done);
#else
            consume<0>(out, base, kv0, bars, tile.q0, tile.bh, seq, causal, tile.nblocks, scale_log2, ring, done);
#endif
            return tile.nblocks;
        };
#if WG_PERSISTENT
        int ring = 0, done = 0;
        for (int t = first; t < tiles; t += step, ++done) ring += run(t, ring, done);
#else
        run(first, 0, 0);  // no tile loop: ring and phase are constants, as in a kernel written for one tile
#endif
    }
#else
    __trap();  // built for an arch without wgmma: the launcher only launches the sm_90a build
#endif
}
}  // namespace fa3

#define FA3_KERNEL(SUFFIX, T)                                                                                  \
    extern "C" __global__ void __launch_bounds__(fa3::THREADS, 1) flash_attention_wgmma_##SUFFIX(              \
        T* __restrict__ out, const void* __restrict__ map_q, const void* __restrict__ map_k,                   \
        const void* __restrict__ map_v, int heads, int kv_heads, int seq, int causal, float scale_log2,         \
        int tiles) {                                                                                           \
        fa3::attention<T>(out, map_q, map_k, map_v, heads, kv_heads, seq, causal, scale_log2, tiles);          \
    }
FA3_KERNEL(f16, __half)
FA3_KERNEL(bf16, __nv_bfloat16)

// ================= WMMA kernel: fp32 (3xTF32), and every dtype when VARIANT is "wmma" =================
// Scores and P go through shared memory; 48 KiB of static shared memory, own tiles (WMMA_WARPS, WMMA_BLOCK_N).
namespace wmma_fa {
using namespace nvcuda;

template <typename T> struct Mma;
template <> struct Mma<__half> { using In = __half; static constexpr int K = 16; };
template <> struct Mma<__nv_bfloat16> { using In = __nv_bfloat16; static constexpr int K = 16; };
template <> struct Mma<float> { using In = wmma::precision::tf32; static constexpr int K = 8; };

constexpr int D = HEAD_DIM;
constexpr int THREADS = WMMA_WARPS * 32;
constexpr int BLOCK_M = 16 * WMMA_WARPS;
static_assert(D % 16 == 0 && D <= 128, "HEAD_DIM must be a multiple of 16 and at most 128");
static_assert(WMMA_BLOCK_N % 16 == 0, "WMMA_BLOCK_N must be a multiple of 16");

template <typename T>
struct Layout {
    static constexpr int LDK = D + 16 / (int)sizeof(T);  // 16-byte row padding (WMMA ldm rule)
    static constexpr int KV = WMMA_BLOCK_N * LDK * (int)sizeof(T);
    static constexpr int S = WMMA_WARPS * 16 * WMMA_BLOCK_N * 4;
    // fp32: P overwrites S
    static constexpr int P = sizeof(T) == 4 ? 0 : WMMA_WARPS * 16 * WMMA_BLOCK_N * (int)sizeof(T);
    static constexpr int O = WMMA_WARPS * 16 * 16 * 4;
    static constexpr int BYTES = 2 * KV + S + P + O;
    static_assert(BYTES <= 48 * 1024, "tiles exceed 48 KiB of static shared memory: lower WMMA_TILES");
};

template <typename T>
__device__ __forceinline__ void attention(T* __restrict__ out, const T* __restrict__ q, const T* __restrict__ k,
                                          const T* __restrict__ v, int heads, int kv_heads, int seq, int causal,
                                          float scale_log2) {
    using L = Layout<T>;
    using In = typename Mma<T>::In;
    constexpr int MK = Mma<T>::K;
    constexpr int VEC = 16 / (int)sizeof(T);
    constexpr int CPL = WMMA_BLOCK_N / 2;  // score columns per lane: two lanes per row
    __shared__ __align__(128) unsigned char smem[L::BYTES];

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int bh = blockIdx.y, b = bh / heads, h = bh % heads, hk = h / (heads / kv_heads);
    const long long qbase = ((long long)b * heads + h) * seq * D;
    const long long kbase = ((long long)b * kv_heads + hk) * seq * D;
    const int q0 = blockIdx.x * BLOCK_M, qw = q0 + warp * 16;
    const int my_row = lane >> 1, half = lane & 1, qi = qw + my_row;

    T* Ks = reinterpret_cast<T*>(smem);
    T* Vs = reinterpret_cast<T*>(smem + L::KV);
    float* Sw = reinterpret_cast<float*>(smem + 2 * L::KV) + warp * 16 * WMMA_BLOCK_N;
    T* Pw = sizeof(T) == 4 ? reinterpret_cast<T*>(Sw)
                           : reinterpret_cast<T*>(smem + 2 * L::KV + L::S) + warp * 16 * WMMA_BLOCK_N;
    float* Ow = reinterpret_cast<float*>(smem + 2 * L::KV + L::S + L::P) + warp * 256;

    // fp32: both products as 3xTF32 (hi + lo parts, PRELUDE split_tf32); plain tf32 fails the peaked-scores
    // stress case (scores ~25: up to 0.023 off against fp32's atol 5e-3).
    constexpr int LO = sizeof(T) == 4 ? 1 : 0;
    // This warp's 16 query rows as WMMA fragments (staged through Ow, zero past the sequence end).
    wmma::fragment<wmma::matrix_a, 16, 16, MK, In, wmma::row_major> qf[D / MK], qf_lo[LO ? D / MK : 1];
    T* stage = reinterpret_cast<T*>(Ow);
#pragma unroll
    for (int c = 0; c < D / MK; ++c) {
        for (int e = lane; e < 16 * MK; e += 32) {
            const int r = qw + e / MK;
            stage[e] = r < seq ? q[qbase + (long long)r * D + c * MK + e % MK] : from_float<T>(0.f);
        }
        __syncwarp();
        wmma::load_matrix_sync(qf[c], stage, MK);
        if constexpr (LO) split_tf32(qf[c], qf_lo[c]);
        __syncwarp();
    }

    float m_i = -INFINITY, l_i = 0.f;
    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;

    const int kend = causal ? min(seq, q0 + BLOCK_M) : seq;
    for (int k0 = 0; k0 < kend; k0 += WMMA_BLOCK_N) {
        __syncthreads();  // every warp is done with the previous K/V tile
        for (int idx = threadIdx.x; idx < WMMA_BLOCK_N * D / VEC; idx += THREADS) {
            const int r = idx / (D / VEC), c = (idx % (D / VEC)) * VEC, key = k0 + r;
            Vec<T, VEC> kv, vv;
            if (key < seq) {
                kv = *reinterpret_cast<const Vec<T, VEC>*>(k + kbase + (long long)key * D + c);
                vv = *reinterpret_cast<const Vec<T, VEC>*>(v + kbase + (long long)key * D + c);
            } else {
#pragma unroll
                for (int t = 0; t < VEC; ++t) { kv.v[t] = from_float<T>(0.f); vv.v[t] = from_float<T>(0.f); }
            }
            *reinterpret_cast<Vec<T, VEC>*>(Ks + r * L::LDK + c) = kv;
            *reinterpret_cast<Vec<T, VEC>*>(Vs + r * L::LDK + c) = vv;
        }
        __syncthreads();

        // S = Q K^T (16 x WMMA_BLOCK_N for this warp), fp32 accumulate.
#pragma unroll
        for (int nf = 0; nf < WMMA_BLOCK_N / 16; ++nf) {
            wmma::fragment<wmma::accumulator, 16, 16, MK, float> s;
            wmma::fill_fragment(s, 0.f);
#pragma unroll
            for (int c = 0; c < D / MK; ++c) {
                wmma::fragment<wmma::matrix_b, 16, 16, MK, In, wmma::col_major> kb, kb_lo;
                wmma::load_matrix_sync(kb, Ks + nf * 16 * L::LDK + c * MK, L::LDK);
                if constexpr (LO) {
                    split_tf32(kb, kb_lo);
                    wmma::mma_sync(s, qf_lo[c], kb, s);
                    wmma::mma_sync(s, qf[c], kb_lo, s);
                }
                wmma::mma_sync(s, qf[c], kb, s);
            }
            wmma::store_matrix_sync(Sw + nf * 16, s, WMMA_BLOCK_N, wmma::mem_row_major);
        }
        __syncwarp();

        // Online softmax in base 2: lanes 2r and 2r+1 share row r.
        float sv[CPL];
        float mx = -INFINITY;
#pragma unroll
        for (int t = 0; t < CPL; ++t) {
            const int col = half * CPL + t, key = k0 + col;
            const bool keep = key < seq && (!causal || key <= qi);
            sv[t] = keep ? Sw[my_row * WMMA_BLOCK_N + col] * scale_log2 : -INFINITY;
            mx = fmaxf(mx, sv[t]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float m_new = fmaxf(m_i, mx);
        const float alpha = (m_i == -INFINITY) ? 0.f : exp2f(m_i - m_new);
        float psum = 0.f;
#pragma unroll
        for (int t = 0; t < CPL; ++t) {
            const float p = (sv[t] == -INFINITY) ? 0.f : exp2f(sv[t] - m_new);
            psum += p;
            Pw[my_row * WMMA_BLOCK_N + half * CPL + t] = from_float<T>(p);
        }
        psum += __shfl_xor_sync(0xffffffffu, psum, 1);
        l_i = l_i * alpha + psum;
        m_i = m_new;
#pragma unroll
        for (int i = 0; i < D / 2; ++i) o[i] *= alpha;
        __syncwarp();

        // O += P V, one 16-column chunk of D at a time through the warp's staging tile.
#pragma unroll
        for (int dc = 0; dc < D / 16; ++dc) {
            wmma::fragment<wmma::accumulator, 16, 16, MK, float> pv;
            wmma::fill_fragment(pv, 0.f);
#pragma unroll
            for (int kn = 0; kn < WMMA_BLOCK_N; kn += MK) {
                wmma::fragment<wmma::matrix_a, 16, 16, MK, In, wmma::row_major> pa, pa_lo;
                wmma::fragment<wmma::matrix_b, 16, 16, MK, In, wmma::row_major> vb, vb_lo;
                wmma::load_matrix_sync(pa, Pw + kn, WMMA_BLOCK_N);
                wmma::load_matrix_sync(vb, Vs + kn * L::LDK + dc * 16, L::LDK);
                if constexpr (LO) {
                    split_tf32(pa, pa_lo);
                    split_tf32(vb, vb_lo);
                    wmma::mma_sync(pv, pa_lo, vb, pv);
                    wmma::mma_sync(pv, pa, vb_lo, pv);
                }
                wmma::mma_sync(pv, pa, vb, pv);
            }
            wmma::store_matrix_sync(Ow, pv, 16, wmma::mem_row_major);
            __syncwarp();
#pragma unroll
            for (int t = 0; t < 8; ++t) o[dc * 8 + t] += Ow[my_row * 16 + half * 8 + t];
            __syncwarp();
        }
    }

    if (qi < seq) {
        const float inv = 1.f / l_i;
        T* orow = out + qbase + (long long)qi * D;
#pragma unroll
        for (int dc = 0; dc < D / 16; ++dc)
#pragma unroll
            for (int t = 0; t < 8; ++t) orow[dc * 16 + half * 8 + t] = from_float<T>(o[dc * 8 + t] * inv);
    }
}
}  // namespace wmma_fa

#define WMMA_KERNEL(SUFFIX, T)                                                                                 \
    extern "C" __global__ void __launch_bounds__(wmma_fa::THREADS) flash_attention_wmma_##SUFFIX(             \
        T* __restrict__ out, const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,      \
        int heads, int kv_heads, int seq, int causal, float scale_log2) {                                    \
        wmma_fa::attention<T>(out, q, k, v, heads, kv_heads, seq, causal, scale_log2);                       \
    }
WMMA_KERNEL(f32, float)
WMMA_KERNEL(f16, __half)
WMMA_KERNEL(bf16, __nv_bfloat16)
"""

_SUFFIX = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
_KERNELS = ["flash_attention_mma_f16", "flash_attention_mma_bf16",
            *(f"flash_attention_wmma_{s}" for s in _SUFFIX.values())]
_WG_KERNELS = ["flash_attention_wgmma_f16", "flash_attention_wgmma_bf16"]
WG_HEAD_DIMS = (64, 128)
WG_BLOCK_M = 128  # query rows a block: two consumer warpgroups x 64
_WG_SLACK = 2048  # up to 1 KiB to round the start up to 1024 bytes (128B swizzle), then (2 + 2 STAGES) mbarriers


def _wg_bytes(head_dim):
    """(Q tile bytes, one K or V tile's bytes) of the wgmma kernel."""
    return WG_BLOCK_M * head_dim * 2, CONFIG["WG_BLOCK_N"] * head_dim * 2


def _wg_stages(head_dim):
    q_bytes, kv_bytes = _wg_bytes(head_dim)
    return max(2, min(CONFIG["WG_STAGES"], (nvrtc.SM90_SHARED_BYTES - _WG_SLACK - q_bytes) // (2 * kv_bytes)))


def _wg_shared(head_dim):
    q_bytes, kv_bytes = _wg_bytes(head_dim)
    return q_bytes + _wg_stages(head_dim) * 2 * kv_bytes + _WG_SLACK


_BUILDS = {}  # (CONFIG's items, head dim, walk) -> _build's tuple (nvrtc.remembered)


def _build(head_dim, walk=False):
    """(defines, wgmma shared bytes, mma shared bytes) of CONFIG as it is now (a CONFIG changed in place gets its own)
    for this head dim; walk: the persistent build (WG_PERSISTENT 1 in the source), which the launcher picks per call
    (_walks), so a causal call under CONFIG WG_PERSISTENT 1 runs the one-tile-a-block build. The defines are not to
    be mutated."""
    # Kept: the dict and the stage arithmetic cost 1.7 us a call on the development CPU, a lookup 0.8 us; with the
    # k / v casts skipped, a whole call on an H100 38-44 -> 34-38 us of host time.
    return nvrtc.remembered(_BUILDS, (tuple(CONFIG.items()), head_dim, walk), _new_build, head_dim, walk)


def _new_build(head_dim, walk):
    defines = {"HEAD_DIM": head_dim, "WARPS": CONFIG["WARPS"], "BLOCK_N": CONFIG["BLOCK_N"],
               "MIN_BLOCKS": CONFIG["MIN_BLOCKS"], **WMMA_TILES, "WG_BLOCK_N": CONFIG["WG_BLOCK_N"],
               "WG_STAGES": _wg_stages(head_dim), "WG_PIPELINE": CONFIG["WG_PIPELINE"], "WG_PIN": CONFIG["WG_PIN"],
               "WG_CONSUMER_COPIES": CONFIG["WG_CONSUMER_COPIES"], "WG_PERSISTENT": int(walk)}
    return defines, _wg_shared(head_dim), _shared_bytes(head_dim)


def _defines(head_dim, walk=False):
    """The build's defines (_build's; not to be mutated)."""
    return _build(head_dim, walk)[0]


def _walks(causal):
    """Whether a call runs the persistent walk (CONFIG WG_PERSISTENT: 2 always, 1 when not causal, 0 never)."""
    return CONFIG["WG_PERSISTENT"] == 2 or (CONFIG["WG_PERSISTENT"] == 1 and not causal)


def cuda_builds():
    """(source, defines, kernel names[, arch]) of every build kernel_fn may request (the tests compile each; no arch:
    the device's own, sm_90 in the tests). The sm_90 builds hold the wgmma kernels as traps (never launched)."""
    return ([(CUDA_SOURCE, _defines(d), list(_KERNELS)) for d in HEAD_DIMS]
            + [(CUDA_SOURCE, _defines(d, walk), _KERNELS + _WG_KERNELS, nvrtc.WGMMA_ARCH) for d in WG_HEAD_DIMS
               for walk in sorted({False, bool(CONFIG["WG_PERSISTENT"])})])


def _shared_bytes(head_dim):
    """Dynamic shared memory of the mma kernel: two stages of K and V with the Q tile on stage 1 (rows padded by 8)."""
    rows = max(4 * CONFIG["BLOCK_N"], 2 * CONFIG["BLOCK_N"] + 16 * CONFIG["WARPS"])
    return rows * (head_dim + 8) * 2


def _aligned(t):
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()  # 16-byte vector loads need 16-byte aligned rows


def _rows_aligned(t):
    """t itself when every row the mma kernel copies (16 bytes per cp.async) starts 16-byte aligned, else a copy."""
    es = t.element_size()
    ok = (t.stride(-1) == 1 and t.data_ptr() % 16 == 0
          and all(st * es % 16 == 0 for st, n in zip(t.stride()[:3], t.shape[:3], strict=True) if n > 1))
    return t if ok else _aligned(t)


_wgmma_arch = nvrtc.wgmma_arch  # sm_90a on sm_90 devices, else None ("mma" runs)


_sm_count = nvrtc.sm_count


def _launch_wgmma(out, q, k, v, causal, sm_scale, common):
    """The TMA + wgmma kernel; False (nothing launched) where it cannot run: the caller then uses "mma".
    common: the scalar arguments every kernel here takes (H, Hkv, S, causal, scale * log2 e)."""
    b, h, s, d = q.shape
    hkv = k.shape[1]
    if (q.dtype not in (torch.float16, torch.bfloat16) or d not in WG_HEAD_DIMS or s % WG_BLOCK_M
            or not sm_scale > 0 or not all(t.is_contiguous() for t in (q, k, v))
            or b * h * s >= 2**31 or _wgmma_arch(q.device) is None):
        return False
    bn = CONFIG["WG_BLOCK_N"]
    try:  # boxes of (rows, 64 elements = 128 bytes), 128-byte swizzle: the tile layouts the kernel's descriptors expect
        map_q = nvrtc.tensor_map(q.view(b * h * s, d), (WG_BLOCK_M, 64), swizzle=128)
        map_k = nvrtc.tensor_map(k.view(b * hkv * s, d), (bn, 64), swizzle=128)
        map_v = nvrtc.tensor_map(v.view(b * hkv * s, d), (bn, 64), swizzle=128)
    except nvrtc.TensorMapError as exc:
        nvrtc.warn_once(f"flash_attention VARIANT 'wgmma' falls back to 'mma': {exc}")
        return False
    walk = _walks(causal)
    defines, shared, _ = _build(d, walk)
    kernel = nvrtc.compile_kernel(CUDA_SOURCE, f"flash_attention_wgmma_{_SUFFIX[q.dtype]}",
                                  defines=defines, arch=nvrtc.WGMMA_ARCH, source_name="flash_attention.cu")
    tiles = s // WG_BLOCK_M * b * h
    grid = (min(tiles, _sm_count(q.device)),) if walk else (s // WG_BLOCK_M, b * h)
    nvrtc.launch(kernel, grid=grid, block=(384,), shared_mem=shared,
                 args=(out, map_q, map_k, map_v, *common, nvrtc.i32(tiles)))
    return True


def kernel_fn(q, k, v, causal, sm_scale):
    b, h, s, d = q.shape
    hkv = k.shape[1]
    if d not in HEAD_DIMS:
        raise ValueError(f"head dim D={d} is not supported by this kernel: use one of {HEAD_DIMS}")
    if h % hkv:
        raise ValueError(f"H={h} is not a multiple of Hkv={hkv}")
    if b * h > MAX_GRID_Y:  # every kernel here puts batch x head on the grid's y axis
        raise ValueError(f"B*H={b * h} exceeds the CUDA grid's y limit {MAX_GRID_Y}: split the batch into calls "
                         f"of at most {MAX_GRID_Y // h} sequences")
    if k.dtype != q.dtype or v.dtype != q.dtype:  # .to of the same dtype still costs 0.8 us a tensor (dev CPU)
        k, v = k.to(q.dtype), v.to(q.dtype)
    out = torch.empty((b, h, s, d), dtype=q.dtype, device=q.device)  # contiguous: the kernels write [B, H, S, D]
    if b * h * s == 0:
        return out
    common = (nvrtc.i32(h), nvrtc.i32(hkv), nvrtc.i32(s), nvrtc.i32(int(bool(causal))),
              nvrtc.f32(float(sm_scale) * math.log2(math.e)))
    if CONFIG["VARIANT"] == "wgmma" and _launch_wgmma(out, q, k, v, causal, sm_scale, common):
        return out
    if CONFIG["VARIANT"] in ("mma", "wgmma") and q.dtype in (torch.float16, torch.bfloat16):
        qc, kc, vc = _rows_aligned(q), _rows_aligned(k), _rows_aligned(v)
        strides = [nvrtc.i64(st) for t in (qc, kc, vc) for st in t.stride()[:3]]  # batch, head, row (elements)
        defines, _, shared = _build(d)
        kernel = nvrtc.compile_kernel(CUDA_SOURCE, f"flash_attention_mma_{_SUFFIX[q.dtype]}", defines=defines,
                                      source_name="flash_attention.cu")
        block_m = 16 * CONFIG["WARPS"]
        nvrtc.launch(kernel, grid=(math.ceil(s / block_m), b * h), block=(32 * CONFIG["WARPS"],),
                     args=(out, qc, kc, vc, *common, *strides), shared_mem=shared)
        return out
    qc, kc, vc = _aligned(q), _aligned(k), _aligned(v)
    kernel = nvrtc.compile_kernel(CUDA_SOURCE, f"flash_attention_wmma_{_SUFFIX[q.dtype]}", defines=_defines(d),
                                  source_name="flash_attention.cu")
    block_m = 16 * WMMA_TILES["WMMA_WARPS"]
    nvrtc.launch(kernel, grid=(math.ceil(s / block_m), b * h), block=(32 * WMMA_TILES["WMMA_WARPS"],),
                 args=(out, qc, kc, vc, *common))
    return out
