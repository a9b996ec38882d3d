"""Softmax over the last dim, CUDA C++ (NVRTC): one row per block (or per warp), 16-byte loads, row kept in registers.

One read of x: each thread folds any part of a wider row past its registers into a running (max, sum of
exp) pair, loads up to CACHE_VECS vectors into registers (all loads in flight at once), takes their max, then one
SFU exp2 per cached element against its own max and keeps it; the pairs are merged with warp shuffles
and each thread writes its kept exps times 2^(own max - row max) / sum. Masked (-inf) entries give
exact zeros.
"""

import math

import torch

from autokernel_ci import nvrtc

KERNEL_TYPE = "softmax"
BACKEND = "cuda"
CONFIG = {"THREADS": 256, "VEC_BYTES": 16, "CACHE_VECS": 4, "UNROLL": 2, "SMALL_N": 1024}
SEARCH_SPACE = {
    "THREADS": [128, 256, 512, 1024],
    "VEC_BYTES": [4, 8, 16],
    "CACHE_VECS": [1, 2, 4, 8],
    "UNROLL": [1, 2, 4, 8],
    "SMALL_N": [0, 512, 1024, 2048],
}

# nvrtc.PRELUDE (autokernel_ci/nvrtc.py) comes first: <cuda_fp16.h>, <cuda_bf16.h>, INFINITY, to_float(x),
# from_float<T>(f), Vec<T, N> (one aligned 4/8/16-byte access), warp_sum(v), group_sum<WPR>(v, red).
# Compiler error lines count from the r""" line below (the prelude ends with #line 1).
CUDA_SOURCE = nvrtc.PRELUDE + r"""
// Merge each thread's (max, sum of exp) pair (online_merge, nvrtc.PRELUDE) over the WPR warps of a row.
template <int WPR>
__device__ __forceinline__ void group_max_sum(float& m, float& s, float* red_m, float* red_s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float om = __shfl_xor_sync(0xffffffffu, m, o);
        const float os = __shfl_xor_sync(0xffffffffu, s, o);
        online_merge(m, s, om, os);
    }
    if (WPR == 1) return;
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) { red_m[warp] = m; red_s[warp] = s; }
    __syncthreads();
    const int first = (warp / WPR) * WPR;
    m = -INFINITY;
    s = 0.f;
#pragma unroll
    for (int i = 0; i < WPR; ++i) online_merge(m, s, red_m[first + i], red_s[first + i]);
}

template <typename T, int VEC, int WPR>
__device__ __forceinline__ void softmax_rows(T* __restrict__ y, const T* __restrict__ x, int rows, int n) {
    __shared__ float red_m[THREADS / 32], red_s[THREADS / 32];
    constexpr int GROUP = WPR * 32;
    using V = Vec<T, VEC>;
    const int tid = threadIdx.x % GROUP;
    const int row = blockIdx.x * (THREADS / GROUP) + threadIdx.x / GROUP;
    const bool valid = row < rows;
    const long long base = (long long)(valid ? row : 0) * n;
    const V* xr = reinterpret_cast<const V*>(x + base);
    V* yr = reinterpret_cast<V*>(y + base);
    const int nvec = valid ? n / VEC : 0;  // the host picks VEC so that VEC divides n

    // A row wider than the registers: the rest streams through the online fold, UNROLL vectors a thread in
    // flight, and is read again below. It goes first: the cache is not yet live, so the kernel's registers are
    // the larger of the two, not their sum (64 at UNROLL 2, 80 at 4). On an H100 (round final15, fp16
    // 2048 x 50257) UNROLL 1 / 2 / 4 ran 323.0 / 340.4 / 319.2 us, all within 1% at LLaMA's 8192 (94 us).
    OnlineLse lse;
    const int rest = nvec - CACHE_VECS * GROUP;
    if (rest > 0) scan_row<T, VEC, UNROLL>(x + base + CACHE_VECS * GROUP * VEC, rest * VEC, tid, GROUP, lse);
    // Then the first CACHE_VECS * GROUP vectors of the row stay in registers (all their loads issued first);
    // entries past the row read -inf and add nothing.
    float cache[CACHE_VECS][VEC];
#pragma unroll
    for (int c = 0; c < CACHE_VECS; ++c) {
        const int i = c * GROUP + tid;
        V v;
        if (i < nvec) v = xr[i];
#pragma unroll
        for (int k = 0; k < VEC; ++k) cache[c][k] = i < nvec ? to_float(v.v[k]) : -INFINITY;
    }
    float m = lse.m, s = lse.s;
#pragma unroll
    for (int c = 0; c < CACHE_VECS; ++c)
#pragma unroll
        for (int k = 0; k < VEC; ++k) m = fmaxf(m, cache[c][k]);
    if (m > lse.m) s *= fast_exp2((lse.m - m) * LOG2E);  // the stream's sum, rescaled to the cached max
    // One exp a cached entry, against this thread's final max, kept for the write: the 8192-wide LLaMA row
    // fits (4 vectors x 256 threads x 8), so each element costs one SFU exp2 instead of two accurate expf.
    const float own_max = m, own_ref = m == -INFINITY ? 0.f : m;  // nothing seen: 2^(-inf - 0) = 0, not NaN
#pragma unroll
    for (int c = 0; c < CACHE_VECS; ++c)
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            cache[c][k] = fast_exp2((cache[c][k] - own_ref) * LOG2E);
            s += cache[c][k];
        }
    group_max_sum<WPR>(m, s, red_m, red_s);
    const float inv = 1.f / s;
    // The cached exps were taken against own_max: rescale to the row's max m (0 if this thread saw only
    // -inf; NaN, as torch gives, when the whole row is -inf).
    const float scale = fast_exp2((own_max - m) * LOG2E) * inv;

#pragma unroll
    for (int c = 0; c < CACHE_VECS; ++c) {
        const int i = c * GROUP + tid;
        if (i < nvec) {
            V o;
#pragma unroll
            for (int k = 0; k < VEC; ++k) o.v[k] = from_float<T>(cache[c][k] * scale);
            yr[i] = o;
        }
    }
#pragma unroll 4
    for (int i = CACHE_VECS * GROUP + tid; i < nvec; i += GROUP) {
        const V v = xr[i];
        V o;
#pragma unroll
        for (int k = 0; k < VEC; ++k) o.v[k] = from_float<T>(fast_exp2((to_float(v.v[k]) - m) * LOG2E) * inv);
        yr[i] = o;
    }
}

#define VEC_OF(T) ((int)(VEC_BYTES / sizeof(T)) > 0 ? (int)(VEC_BYTES / sizeof(T)) : 1)
#define SOFTMAX_KERNEL(NAME, T, VEC, WPR)                                                                   \
    extern "C" __global__ void __launch_bounds__(THREADS) softmax_##NAME(T* __restrict__ y, const T* __restrict__ x, \
                                                                         int rows, int n) {                \
        softmax_rows<T, VEC, WPR>(y, x, rows, n);                                                           \
    }
#define SOFTMAX_DTYPE(SUFFIX, T)                              \
    SOFTMAX_KERNEL(SUFFIX##_v_w, T, VEC_OF(T), THREADS / 32)  \
    SOFTMAX_KERNEL(SUFFIX##_s_w, T, 1, THREADS / 32)          \
    SOFTMAX_KERNEL(SUFFIX##_v_n, T, VEC_OF(T), 1)             \
    SOFTMAX_KERNEL(SUFFIX##_s_n, T, 1, 1)

SOFTMAX_DTYPE(f32, float)
SOFTMAX_DTYPE(f16, __half)
SOFTMAX_DTYPE(bf16, __nv_bfloat16)
"""

_SUFFIX = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def _defines():
    return {"THREADS": CONFIG["THREADS"], "VEC_BYTES": CONFIG["VEC_BYTES"], "CACHE_VECS": CONFIG["CACHE_VECS"],
            "UNROLL": CONFIG["UNROLL"]}


def cuda_builds():
    """(source, defines, kernel names) of every build kernel_fn may request (the tests compile each)."""
    names = [f"softmax_{s}_{v}_{w}" for s in _SUFFIX.values() for v in "sv" for w in "nw"]
    return [(CUDA_SOURCE, _defines(), names)]


def kernel_fn(x):
    n = x.shape[-1]
    x2 = x.contiguous().view(-1, n)
    y = torch.empty_like(x2)
    rows = x2.shape[0]
    if rows == 0 or n == 0:
        return y.view(x.shape)
    vec_bytes = CONFIG["VEC_BYTES"]
    vec = max(vec_bytes // x.element_size(), 1)
    aligned = n % vec == 0 and x2.data_ptr() % vec_bytes == 0 and y.data_ptr() % vec_bytes == 0
    wide = n > CONFIG["SMALL_N"]
    threads = CONFIG["THREADS"]
    rows_per_block = 1 if wide else threads // 32
    name = f"softmax_{_SUFFIX[x.dtype]}_{'v' if aligned else 's'}_{'w' if wide else 'n'}"
    kernel = nvrtc.compile_kernel(CUDA_SOURCE, name, defines=_defines(), source_name="softmax.cu")
    nvrtc.launch(kernel, grid=(math.ceil(rows / rows_per_block),), block=(threads,),
                 args=(y, x2, nvrtc.i32(rows), nvrtc.i32(n)))
    return y.view(x.shape)
