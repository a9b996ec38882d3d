"""RMSNorm, CUDA C++ (NVRTC): one row per block (or per warp for short rows), 16-byte loads, row held in registers.

Each thread keeps up to CACHE_VECS vectors of its row, and the weight's, in registers (both loaded
before the reduction), so x is read from memory once;
the mean square is reduced with warp shuffles (fp32), then x * rsqrt(ms + eps) * weight is written.
Rows longer than the register cache re-read the rest (from L2). Rows of at most SMALL_N elements
get one warp each, THREADS/32 rows per block.
"""

import math

import torch

from autokernel_ci import nvrtc

KERNEL_TYPE = "rmsnorm"
BACKEND = "cuda"
CONFIG = {"THREADS": 128, "VEC_BYTES": 16, "CACHE_VECS": 4, "MIN_BLOCKS": 1, "SMALL_N": 1024, "EVICT_FIRST": False,
          "STREAM_STORE": False, "WEIGHTS_LATE": False}
SEARCH_SPACE = {
    "THREADS": [128, 256, 512, 1024],
    "VEC_BYTES": [4, 8, 16],
    "CACHE_VECS": [1, 2, 4, 8],
    "MIN_BLOCKS": [1, 2, 4, 8],
    "SMALL_N": [0, 512, 1024, 2048],
    "EVICT_FIRST": [False, True],
    "STREAM_STORE": [False, True],
    "WEIGHTS_LATE": [False, True],
}
# EVICT_FIRST: x's register-cached vectors (read once) are loaded evict-first (ld.global.cs; the weights, read by every
# row, keep the default policy); STREAM_STORE: y is stored evict-first (st.global.cs), nothing reading it back. Both
# off: on an H100 (2026-12-06, round norms20, bf16 8192 x 4096, alternating) 49.5-50.2 / 49.9-50.0 / 50.0-50.7 us
# (EVICT_FIRST / STREAM_STORE / both) against 49.2-50.1 without.
# WEIGHTS_LATE (w loaded in the output loop; 95 -> 63 registers): off, 50.3-51.1 us against 49.4-50.4 (same H100,
# round norms21's repeat, alternating): the rmsnorm's 96 registers already allow 5 blocks an SM.

# nvrtc.PRELUDE (autokernel_ci/prelude.cuh) comes first: <cuda_fp16.h>, <cuda_bf16.h>, INFINITY, to_float(x),
# from_float<T>(f), Vec<T, N> (one aligned 4/8/16-byte access), warp_sum(v), group_sum<WPR>(v, red).
# Compiler error lines count from the r""" line below (the prelude ends with #line 1).
CUDA_SOURCE = nvrtc.PRELUDE + r"""
template <typename T, int VEC, int WPR>
__device__ __forceinline__ void rmsnorm_rows(T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ w,
                                             int rows, int n, float eps) {
    __shared__ float red[THREADS / 32];
    constexpr int GROUP = WPR * 32;
    using V = Vec<T, VEC>;
    const int tid = threadIdx.x % GROUP;
    const int row = blockIdx.x * (THREADS / GROUP) + threadIdx.x / GROUP;
    const bool valid = row < rows;
    const long long base = (long long)(valid ? row : 0) * n;
    const V* xr = reinterpret_cast<const V*>(x + base);
    const V* wv = reinterpret_cast<const V*>(w);
    V* yr = reinterpret_cast<V*>(y + base);
    const int nvec = valid ? n / VEC : 0;  // the host picks VEC so that VEC divides n

    // The weight's vectors are loaded with x's (one latency, not a second one after the reduction), and both are
    // kept as loaded (bf16: 4 registers a vector, not 8 floats): 62 -> 96 registers a thread, and half the
    // blocks an SM, when x was kept as floats next to the weights. WEIGHTS_LATE loads them in the output loop
    // instead (L2 hits after the reduction, fewer registers held across it).
    V xc[CACHE_VECS], wc[CACHE_VECS];
    float ss = 0.f;
#pragma unroll
    for (int c = 0; c < CACHE_VECS; ++c) {
        const int i = c * GROUP + tid;
        if (i < nvec) {
            xc[c] = load_vec<EVICT_FIRST>(xr + i);  // read once: the tail loops re-read only past the cache
            if constexpr (!WEIGHTS_LATE) wc[c] = wv[i];
        }
    }
#pragma unroll
    for (int c = 0; c < CACHE_VECS; ++c) {
        if (c * GROUP + tid < nvec) {
#pragma unroll
            for (int k = 0; k < VEC; ++k) { const float f = to_float(xc[c].v[k]); ss += f * f; }
        }
    }
    for (int i = CACHE_VECS * GROUP + tid; i < nvec; i += GROUP) {
        const V v = xr[i];
#pragma unroll
        for (int k = 0; k < VEC; ++k) { const float f = to_float(v.v[k]); ss += f * f; }
    }
    ss = group_sum<WPR>(ss, red);
    const float inv = rsqrtf(ss / (float)n + eps);

#pragma unroll
    for (int c = 0; c < CACHE_VECS; ++c) {
        const int i = c * GROUP + tid;
        if (i < nvec) {
            if constexpr (WEIGHTS_LATE) wc[c] = wv[i];
            V o;
#pragma unroll
            for (int k = 0; k < VEC; ++k) o.v[k] = from_float<T>(to_float(xc[c].v[k]) * inv * to_float(wc[c].v[k]));
            store_vec<STREAM_STORE>(yr + i, o);
        }
    }
    for (int i = CACHE_VECS * GROUP + tid; i < nvec; i += GROUP) {
        const V v = xr[i], g = wv[i];
        V o;
#pragma unroll
        for (int k = 0; k < VEC; ++k) o.v[k] = from_float<T>(to_float(v.v[k]) * inv * to_float(g.v[k]));
        store_vec<STREAM_STORE>(yr + i, o);
    }
}

#define VEC_OF(T) ((int)(VEC_BYTES / sizeof(T)) > 0 ? (int)(VEC_BYTES / sizeof(T)) : 1)
#define RMSNORM_KERNEL(NAME, T, VEC, WPR)                                                              \
    extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) rmsnorm_##NAME(                  \
        T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ w, int rows, int n, float eps) { \
        rmsnorm_rows<T, VEC, WPR>(y, x, w, rows, n, eps);                                              \
    }
#define RMSNORM_DTYPE(SUFFIX, T)                                 \
    RMSNORM_KERNEL(SUFFIX##_v_w, T, VEC_OF(T), THREADS / 32)     \
    RMSNORM_KERNEL(SUFFIX##_s_w, T, 1, THREADS / 32)             \
    RMSNORM_KERNEL(SUFFIX##_v_n, T, VEC_OF(T), 1)                \
    RMSNORM_KERNEL(SUFFIX##_s_n, T, 1, 1)

RMSNORM_DTYPE(f32, float)
RMSNORM_DTYPE(f16, __half)
RMSNORM_DTYPE(bf16, __nv_bfloat16)
"""

_SUFFIX = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def _defines():
    return {"THREADS": CONFIG["THREADS"], "VEC_BYTES": CONFIG["VEC_BYTES"], "CACHE_VECS": CONFIG["CACHE_VECS"],
            "MIN_BLOCKS": CONFIG["MIN_BLOCKS"], "EVICT_FIRST": int(CONFIG["EVICT_FIRST"]),
            "STREAM_STORE": int(CONFIG["STREAM_STORE"]), "WEIGHTS_LATE": int(CONFIG["WEIGHTS_LATE"])}


def cuda_builds():
    """(source, defines, kernel names) of every build kernel_fn may request (the tests compile each)."""
    names = [f"rmsnorm_{s}_{v}_{w}" for s in _SUFFIX.values() for v in "sv" for w in "nw"]
    return [(CUDA_SOURCE, _defines(), names)]


def kernel_fn(x, weight, eps):
    n = x.shape[-1]
    x2 = x.contiguous().view(-1, n)
    w = weight.to(x.dtype).contiguous()
    y = torch.empty_like(x2)
    rows = x2.shape[0]
    if rows == 0 or n == 0:
        return y.view(x.shape)
    vec_bytes = CONFIG["VEC_BYTES"]
    vec = max(vec_bytes // x.element_size(), 1)
    aligned = n % vec == 0 and all(t.data_ptr() % vec_bytes == 0 for t in (x2, w, y))
    wide = n > CONFIG["SMALL_N"]
    threads = CONFIG["THREADS"]
    rows_per_block = 1 if wide else threads // 32
    name = f"rmsnorm_{_SUFFIX[x.dtype]}_{'v' if aligned else 's'}_{'w' if wide else 'n'}"
    kernel = nvrtc.compile_kernel(CUDA_SOURCE, name, defines=_defines(), source_name="rmsnorm.cu")
    nvrtc.launch(kernel, grid=(math.ceil(rows / rows_per_block),), block=(threads,),
                 args=(y, x2, w, nvrtc.i32(rows), nvrtc.i32(n), nvrtc.f32(eps)))
    return y.view(x.shape)
