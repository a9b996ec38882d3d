"""Softmax over the last dim, CUDA C++ (NVRTC): one row per block (or per warp), 16-byte loads, row kept in registers.

One read of x: each thread folds its vectors into a running (max, sum of exp) pair while caching
up to CACHE_VECS vectors in registers; the pairs are merged with warp shuffles, then
exp(x - max) / sum is written from the registers. Masked (-inf) entries give exact zeros.
"""

import math

import torch

from autokernel_ci import nvrtc

KERNEL_TYPE = "softmax"
BACKEND = "cuda"
CONFIG = {"THREADS": 256, "VEC_BYTES": 16, "CACHE_VECS": 4, "SMALL_N": 1024}
SEARCH_SPACE = {
    "THREADS": [128, 256, 512, 1024],
    "VEC_BYTES": [4, 8, 16],
    "CACHE_VECS": [1, 2, 4, 8],
    "SMALL_N": [0, 512, 1024, 2048],
}

# nvrtc.PRELUDE (autokernel_ci/nvrtc.py) comes first: <cuda_fp16.h>, <cuda_bf16.h>, INFINITY, to_float(x),
# from_float<T>(f), Vec<T, N> (one aligned 4/8/16-byte access), warp_sum(v), group_sum<WPR>(v, red).
# Compiler error lines count from the r""" line below (the prelude ends with #line 1).
CUDA_SOURCE = nvrtc.PRELUDE + r"""
// Merge running (max, sum of exp(x - max)) pairs; -inf max means "nothing seen yet".
__device__ __forceinline__ void merge(float& m, float& s, float om, float os) {
    const float nm = fmaxf(m, om);
    const float a = (m == -INFINITY) ? 0.f : s * expf(m - nm);
    const float b = (om == -INFINITY) ? 0.f : os * expf(om - nm);
    m = nm;
    s = a + b;
}

template <int WPR>
__device__ __forceinline__ void group_max_sum(float& m, float& s, float* red_m, float* red_s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float om = __shfl_xor_sync(0xffffffffu, m, o);
        const float os = __shfl_xor_sync(0xffffffffu, s, o);
        merge(m, s, om, os);
    }
    if (WPR == 1) return;
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) { red_m[warp] = m; red_s[warp] = s; }
    __syncthreads();
    const int first = (warp / WPR) * WPR;
    m = -INFINITY;
    s = 0.f;
#pragma unroll
    for (int i = 0; i < WPR; ++i) merge(m, s, red_m[first + i], red_s[first + i]);
}

template <typename T, int VEC>
__device__ __forceinline__ void fold(float& m, float& s, const float (&v)[VEC]) {
    float vm = v[0];
#pragma unroll
    for (int k = 1; k < VEC; ++k) vm = fmaxf(vm, v[k]);
    if (vm == -INFINITY) return;  // all masked: contributes nothing
    if (vm > m) { s = (m == -INFINITY) ? 0.f : s * expf(m - vm); m = vm; }
#pragma unroll
    for (int k = 0; k < VEC; ++k) s += expf(v[k] - m);
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

    float cache[CACHE_VECS][VEC];
    float m = -INFINITY, s = 0.f;
#pragma unroll
    for (int c = 0; c < CACHE_VECS; ++c) {
        const int i = c * GROUP + tid;
        if (i < nvec) {
            const V v = xr[i];
#pragma unroll
            for (int k = 0; k < VEC; ++k) cache[c][k] = to_float(v.v[k]);
            fold<T, VEC>(m, s, cache[c]);
        }
    }
    for (int i = CACHE_VECS * GROUP + tid; i < nvec; i += GROUP) {
        const V v = xr[i];
        float f[VEC];
#pragma unroll
        for (int k = 0; k < VEC; ++k) f[k] = to_float(v.v[k]);
        fold<T, VEC>(m, s, f);
    }
    group_max_sum<WPR>(m, s, red_m, red_s);
    const float inv = 1.f / s;

#pragma unroll
    for (int c = 0; c < CACHE_VECS; ++c) {
        const int i = c * GROUP + tid;
        if (i < nvec) {
            V o;
#pragma unroll
            for (int k = 0; k < VEC; ++k) o.v[k] = from_float<T>(expf(cache[c][k] - m) * inv);
            yr[i] = o;
        }
    }
    for (int i = CACHE_VECS * GROUP + tid; i < nvec; i += GROUP) {
        const V v = xr[i];
        V o;
#pragma unroll
        for (int k = 0; k < VEC; ++k) o.v[k] = from_float<T>(expf(to_float(v.v[k]) - m) * inv);
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
    return {"THREADS": CONFIG["THREADS"], "VEC_BYTES": CONFIG["VEC_BYTES"], "CACHE_VECS": CONFIG["CACHE_VECS"]}


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
