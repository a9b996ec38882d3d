"""LayerNorm, CUDA C++ (NVRTC): one row per block (or per warp), 16-byte loads, two-pass statistics from registers.

x is read from memory once into registers (up to CACHE_VECS vectors a thread; the weight's and bias's are
loaded for the output, WEIGHTS_LATE); the mean, then the
variance of (x - mean), are reduced with warp shuffles in fp32 (two passes over registers, so a
mean of 1000 with std 1 keeps its digits), then (x - mean) * rstd * weight + bias is written.
"""

import math

import torch

from autokernel_ci import nvrtc

KERNEL_TYPE = "layernorm"
BACKEND = "cuda"
CONFIG = {"THREADS": 128, "VEC_BYTES": 16, "CACHE_VECS": 4, "MIN_BLOCKS": 1, "SMALL_N": 1024, "EVICT_FIRST": True,
          "STREAM_STORE": False, "WEIGHTS_LATE": True}
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
# row, keep the default policy); STREAM_STORE: y is stored evict-first (st.global.cs), nothing reading it back. On an
# H100 (2026-12-06, round norms20, bf16 8192 x 4096, alternating): EVICT_FIRST 52.6-53.5 us against 53.4-54.3 off, 5 of
# 5 pairs (about 1.5%); STREAM_STORE 53.2-54.0, both 53.6-54.4: no gain, off.
# WEIGHTS_LATE: w and b are loaded in the output loop, after the reductions (L2 hits), not with x: 128 -> 64 registers
# (ptxas, bf16 wide rows), 4 -> 8 blocks an SM. On an H100 (2026-12-06, round norms21 and a repeat, bf16 8192 x 4096,
# alternating): 50.9-53.0 us against 52.6-53.7, 7 of 7 pairs (about 3%); at 256 x 2 / 256 x 4 / 512 x 1 52.9-79.6 us.

# nvrtc.PRELUDE (autokernel_ci/prelude.cuh) comes first: <cuda_fp16.h>, <cuda_bf16.h>, INFINITY, to_float(x),
# from_float<T>(f), Vec<T, N> (one aligned 4/8/16-byte access), warp_sum(v), group_sum<WPR>(v, red).
# Compiler error lines count from the r""" line below (the prelude ends with #line 1).
CUDA_SOURCE = nvrtc.PRELUDE + r"""
template <typename T, int VEC, int WPR>
__device__ __forceinline__ void layernorm_rows(T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ w,
                                               const T* __restrict__ b, int rows, int n, float eps) {
    __shared__ float red[THREADS / 32];
    constexpr int GROUP = WPR * 32;
    using V = Vec<T, VEC>;
    const int tid = threadIdx.x % GROUP;
    const int row = blockIdx.x * (THREADS / GROUP) + threadIdx.x / GROUP;
    const bool valid = row < rows;
    const long long base = (long long)(valid ? row : 0) * n;
    const V* xr = reinterpret_cast<const V*>(x + base);
    const V* wv = reinterpret_cast<const V*>(w);
    const V* bv = reinterpret_cast<const V*>(b);
    V* yr = reinterpret_cast<V*>(y + base);
    const int nvec = valid ? n / VEC : 0;  // the host picks VEC so that VEC divides n

    // x is kept as loaded (bf16: 4 registers a vector, not 8 floats). WEIGHTS_LATE (the default) loads the
    // weight's and bias's vectors in the output loop, where they are L2 hits, so only x's are held across the two
    // reductions (64 registers a thread); off, they are loaded with x's (one latency fewer, 128 registers).
    V xc[CACHE_VECS], wc[CACHE_VECS], bc[CACHE_VECS];
    float sum = 0.f;
#pragma unroll
    for (int c = 0; c < CACHE_VECS; ++c) {
        const int i = c * GROUP + tid;
        if (i < nvec) {
            xc[c] = load_vec<EVICT_FIRST>(xr + i);  // read once: the tail loops re-read only past the cache
            if constexpr (!WEIGHTS_LATE) {
                wc[c] = wv[i];
                bc[c] = bv[i];
            }
        }
    }
#pragma unroll
    for (int c = 0; c < CACHE_VECS; ++c) {
        if (c * GROUP + tid < nvec) {
#pragma unroll
            for (int k = 0; k < VEC; ++k) sum += to_float(xc[c].v[k]);
        }
    }
    for (int i = CACHE_VECS * GROUP + tid; i < nvec; i += GROUP) {
        const V v = xr[i];
#pragma unroll
        for (int k = 0; k < VEC; ++k) sum += to_float(v.v[k]);
    }
    const float mean = group_sum<WPR>(sum, red) / (float)n;

    float sq = 0.f;
#pragma unroll
    for (int c = 0; c < CACHE_VECS; ++c) {
        const int i = c * GROUP + tid;
        if (i < nvec) {
#pragma unroll
            for (int k = 0; k < VEC; ++k) { const float d = to_float(xc[c].v[k]) - mean; sq += d * d; }
        }
    }
    for (int i = CACHE_VECS * GROUP + tid; i < nvec; i += GROUP) {
        const V v = xr[i];
#pragma unroll
        for (int k = 0; k < VEC; ++k) { const float d = to_float(v.v[k]) - mean; sq += d * d; }
    }
    const float rstd = rsqrtf(group_sum<WPR>(sq, red) / (float)n + eps);

#pragma unroll
    for (int c = 0; c < CACHE_VECS; ++c) {
        const int i = c * GROUP + tid;
        if (i < nvec) {
            if constexpr (WEIGHTS_LATE) {
                wc[c] = wv[i];
                bc[c] = bv[i];
            }
            V o;
#pragma unroll
            for (int k = 0; k < VEC; ++k)
                o.v[k] = from_float<T>((to_float(xc[c].v[k]) - mean) * rstd * to_float(wc[c].v[k]) +
                                       to_float(bc[c].v[k]));
            store_vec<STREAM_STORE>(yr + i, o);
        }
    }
    for (int i = CACHE_VECS * GROUP + tid; i < nvec; i += GROUP) {
        const V v = xr[i], g = wv[i], h = bv[i];
        V o;
#pragma unroll
        for (int k = 0; k < VEC; ++k)
            o.v[k] = from_float<T>((to_float(v.v[k]) - mean) * rstd * to_float(g.v[k]) + to_float(h.v[k]));
        store_vec<STREAM_STORE>(yr + i, o);
    }
}

#define VEC_OF(T) ((int)(VEC_BYTES / sizeof(T)) > 0 ? (int)(VEC_BYTES / sizeof(T)) : 1)
#define LAYERNORM_KERNEL(NAME, T, VEC, WPR)                                                                 \
    extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) layernorm_##NAME(                     \
        T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,       \
        int rows, int n, float eps) {                                                                       \
        layernorm_rows<T, VEC, WPR>(y, x, w, b, rows, n, eps);                                              \
    }
#define LAYERNORM_DTYPE(SUFFIX, T)                              \
    LAYERNORM_KERNEL(SUFFIX##_v_w, T, VEC_OF(T), THREADS / 32)  \
    LAYERNORM_KERNEL(SUFFIX##_s_w, T, 1, THREADS / 32)          \
    LAYERNORM_KERNEL(SUFFIX##_v_n, T, VEC_OF(T), 1)             \
    LAYERNORM_KERNEL(SUFFIX##_s_n, T, 1, 1)

LAYERNORM_DTYPE(f32, float)
LAYERNORM_DTYPE(f16, __half)
LAYERNORM_DTYPE(bf16, __nv_bfloat16)
"""

_SUFFIX = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def _defines():
    return {"THREADS": CONFIG["THREADS"], "VEC_BYTES": CONFIG["VEC_BYTES"], "CACHE_VECS": CONFIG["CACHE_VECS"],
            "MIN_BLOCKS": CONFIG["MIN_BLOCKS"], "EVICT_FIRST": int(CONFIG["EVICT_FIRST"]),
            "STREAM_STORE": int(CONFIG["STREAM_STORE"]), "WEIGHTS_LATE": int(CONFIG["WEIGHTS_LATE"])}


def cuda_builds():
    """(source, defines, kernel names) of every build kernel_fn may request (the tests compile each)."""
    names = [f"layernorm_{s}_{v}_{w}" for s in _SUFFIX.values() for v in "sv" for w in "nw"]
    return [(CUDA_SOURCE, _defines(), names)]


def kernel_fn(x, weight, bias, eps):
    n = x.shape[-1]
    x2 = x.contiguous().view(-1, n)
    w = weight.to(x.dtype).contiguous()
    b = bias.to(x.dtype).contiguous()
    y = torch.empty_like(x2)
    rows = x2.shape[0]
    if rows == 0 or n == 0:
        return y.view(x.shape)
    vec_bytes = CONFIG["VEC_BYTES"]
    vec = max(vec_bytes // x.element_size(), 1)
    aligned = n % vec == 0 and all(t.data_ptr() % vec_bytes == 0 for t in (x2, w, b, y))
    wide = n > CONFIG["SMALL_N"]
    threads = CONFIG["THREADS"]
    rows_per_block = 1 if wide else threads // 32
    name = f"layernorm_{_SUFFIX[x.dtype]}_{'v' if aligned else 's'}_{'w' if wide else 'n'}"
    kernel = nvrtc.compile_kernel(CUDA_SOURCE, name, defines=_defines(), source_name="layernorm.cu")
    nvrtc.launch(kernel, grid=(math.ceil(rows / rows_per_block),), block=(threads,),
                 args=(y, x2, w, b, nvrtc.i32(rows), nvrtc.i32(n), nvrtc.f32(eps)))
    return y.view(x.shape)
