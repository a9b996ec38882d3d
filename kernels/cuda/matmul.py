"""Matmul a[M,K] @ b[K,N], CUDA C++ (NVRTC): tensor cores through WMMA, shared-memory tiles, register prefetch.

Each block computes a BM x BN tile of the output with WARPS_M x WARPS_N warps; each warp owns a
(BM/WARPS_M) x (BN/WARPS_N) sub-tile of 16x16 WMMA accumulators in fp32. bf16/fp16 use the
m16n16k16 tensor-core shape; fp32 inputs use TF32 (m16n16k8; rel. error ~3e-4, inside the GEMM
tolerance). The next K-slice is fetched into registers (16-byte loads) while the tensor cores
work on the current one. Ragged edges are zero-filled, so any M, N, K works.
This is a plain WMMA (mma.sync) kernel: it does not use Hopper's wgmma/TMA, so expect well below
cuBLAS on H100/H200 (see docs/cuda-backend.md).
"""

import math

import torch

from autokernel_ci import nvrtc

KERNEL_TYPE = "matmul"
BACKEND = "cuda"
CONFIG = {"BM": 128, "BN": 128, "BK": 32, "WARPS_M": 2, "WARPS_N": 4}
SEARCH_SPACE = {"BM": [64, 128], "BN": [64, 128], "BK": [16, 32], "WARPS_M": [1, 2, 4], "WARPS_N": [2, 4]}

# nvrtc.PRELUDE (autokernel_ci/nvrtc.py) comes first: <cuda_fp16.h>, <cuda_bf16.h>, INFINITY, to_float(x),
# from_float<T>(f), Vec<T, N> (one aligned 4/8/16-byte access), warp_sum(v), group_sum<WPR>(v, red).
# Compiler error lines count from the r""" line below (the prelude ends with #line 1).
CUDA_SOURCE = nvrtc.PRELUDE + r"""
#include <mma.h>
using namespace nvcuda;

// Tensor-core input type and K depth of one WMMA step per storage type.
template <typename T> struct Mma;
template <> struct Mma<__half> { using In = __half; static constexpr int K = 16; };
template <> struct Mma<__nv_bfloat16> { using In = __nv_bfloat16; static constexpr int K = 16; };
template <> struct Mma<float> { using In = wmma::precision::tf32; static constexpr int K = 8; };

constexpr int WARPS = WARPS_M * WARPS_N;
constexpr int THREADS = WARPS * 32;
constexpr int WM = BM / WARPS_M;  // warp tile
constexpr int WN = BN / WARPS_N;
constexpr int FM = WM / 16;
constexpr int FN = WN / 16;
static_assert(BM % (16 * WARPS_M) == 0 && BN % (16 * WARPS_N) == 0, "BM, BN must be multiples of 16 * warps");
static_assert(BK % 16 == 0, "BK must be a multiple of 16");

template <typename T>
struct Smem {
    static constexpr int PAD = 16 / sizeof(T);  // 16-byte row padding: WMMA ldm rule, fewer bank conflicts
    static constexpr int LDA = BK + PAD;
    static constexpr int LDB = BN + PAD;
    static constexpr int TILES = (BM * LDA + BK * LDB) * (int)sizeof(T);
    static constexpr int STAGE = WARPS * 256 * 4;  // epilogue staging, reuses the tile memory
    static constexpr int BYTES = TILES > STAGE ? TILES : STAGE;
    static_assert(BYTES <= 48 * 1024, "tiles exceed 48 KiB of static shared memory: lower BM, BN or BK");
};

template <typename T, int VEC, int R, int C>
struct TileLoader {
    static constexpr int VECS = R * C / VEC;
    static constexpr int PER = (VECS + THREADS - 1) / THREADS;
    Vec<T, VEC> reg[PER];

    // Rows [r0, r0 + R) x cols [c0, c0 + C) of a row-major rows x cols matrix; zeros outside.
    __device__ __forceinline__ void fetch(const T* __restrict__ src, int rows, int cols, int r0, int c0) {
#pragma unroll
        for (int p = 0; p < PER; ++p) {
            const int idx = threadIdx.x + p * THREADS;
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
            const int idx = threadIdx.x + p * THREADS;
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
    T* Bs = As + BM * S::LDA;  // BM * LDA * sizeof(T) is a multiple of 32 bytes (WMMA pointer alignment)

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;

    wmma::fragment<wmma::accumulator, 16, 16, MK, float> acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; ++i)
#pragma unroll
        for (int j = 0; j < FN; ++j) wmma::fill_fragment(acc[i][j], 0.f);

    TileLoader<T, VEC, BM, BK> la;
    TileLoader<T, VEC, BK, BN> lb;
    la.fetch(a, m, k, bm, 0);
    lb.fetch(b, k, n, 0, bn);
    for (int k0 = 0; k0 < k; k0 += BK) {
        la.store(As, S::LDA);
        lb.store(Bs, S::LDB);
        __syncthreads();
        if (k0 + BK < k) {  // next slice in flight while the tensor cores work
            la.fetch(a, m, k, bm, k0 + BK);
            lb.fetch(b, k, n, k0 + BK, bn);
        }
#pragma unroll
        for (int kk = 0; kk < BK; kk += MK) {
            wmma::fragment<wmma::matrix_a, 16, 16, MK, In, wmma::row_major> fa[FM];
            wmma::fragment<wmma::matrix_b, 16, 16, MK, In, wmma::row_major> fb[FN];
#pragma unroll
            for (int i = 0; i < FM; ++i) {
                wmma::load_matrix_sync(fa[i], As + (wm * WM + i * 16) * S::LDA + kk, S::LDA);
                if constexpr (sizeof(T) == 4) {
#pragma unroll
                    for (int t = 0; t < fa[i].num_elements; ++t) fa[i].x[t] = wmma::__float_to_tf32(fa[i].x[t]);
                }
            }
#pragma unroll
            for (int j = 0; j < FN; ++j) {
                wmma::load_matrix_sync(fb[j], Bs + kk * S::LDB + wn * WN + j * 16, S::LDB);
                if constexpr (sizeof(T) == 4) {
#pragma unroll
                    for (int t = 0; t < fb[j].num_elements; ++t) fb[j].x[t] = wmma::__float_to_tf32(fb[j].x[t]);
                }
            }
#pragma unroll
            for (int i = 0; i < FM; ++i)
#pragma unroll
                for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads();
    }

    // Epilogue: each 16x16 accumulator goes through this warp's staging tile (the tiles' memory: the
    // loop's last __syncthreads() has retired every read of it), then to global with bounds.
    float* Cs = reinterpret_cast<float*>(smem) + warp * 256;
#pragma unroll
    for (int i = 0; i < FM; ++i) {
#pragma unroll
        for (int j = 0; j < FN; ++j) {
            wmma::store_matrix_sync(Cs, acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            const int r0 = bm + wm * WM + i * 16, c0 = bn + wn * WN + j * 16;
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
    extern "C" __global__ void __launch_bounds__(THREADS) matmul_##NAME(                                     \
        T* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b, int m, int n, int k) {        \
        matmul_tile<T, VEC>(out, a, b, m, n, k);                                                             \
    }
#define MATMUL_DTYPE(SUFFIX, T)              \
    MATMUL_KERNEL(SUFFIX##_v, T, VEC_OF(T))  \
    MATMUL_KERNEL(SUFFIX##_s, T, 1)

MATMUL_DTYPE(f32, float)
MATMUL_DTYPE(f16, __half)
MATMUL_DTYPE(bf16, __nv_bfloat16)
"""

_SUFFIX = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def _defines():
    return {k: CONFIG[k] for k in ("BM", "BN", "BK", "WARPS_M", "WARPS_N")}


def cuda_builds():
    """(source, defines, kernel names) of every build kernel_fn may request (the tests compile each)."""
    return [(CUDA_SOURCE, _defines(), [f"matmul_{s}_{v}" for s in _SUFFIX.values() for v in "sv"])]


def kernel_fn(a, b):
    m, k = a.shape
    n = b.shape[1]
    ac = a.contiguous()
    bc = b.to(a.dtype).contiguous()
    out = torch.empty((m, n), dtype=a.dtype, device=a.device)
    if m == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_()
    vec = 16 // a.element_size()
    aligned = k % vec == 0 and n % vec == 0 and ac.data_ptr() % 16 == 0 and bc.data_ptr() % 16 == 0
    name = f"matmul_{_SUFFIX[a.dtype]}_{'v' if aligned else 's'}"
    kernel = nvrtc.compile_kernel(CUDA_SOURCE, name, defines=_defines(), source_name="matmul.cu")
    threads = CONFIG["WARPS_M"] * CONFIG["WARPS_N"] * 32
    grid = (math.ceil(n / CONFIG["BN"]), math.ceil(m / CONFIG["BM"]))
    nvrtc.launch(kernel, grid=grid, block=(threads,), args=(out, ac, bc, nvrtc.i32(m), nvrtc.i32(n), nvrtc.i32(k)))
    return out
