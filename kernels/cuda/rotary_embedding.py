"""Rotary embedding (rotate-half), CUDA C++ (NVRTC): one thread per VEC pairs, 16-byte loads, fp32 math.

Thread j of row r = (b, h, s) reads x1 = x[r, j*VEC : +VEC], x2 = x[r, D/2 + j*VEC : +VEC] and the
matching cos/sin of position s, and writes x1*cos - x2*sin and x2*cos + x1*sin: every byte of x,
cos and sin is read once per use and the output written once. Grid-stride, 64-bit indices.
"""

import torch

from autokernel_ci import nvrtc

KERNEL_TYPE = "rotary_embedding"
BACKEND = "cuda"
CONFIG = {"THREADS": 256, "VEC_BYTES": 16, "BLOCKS_PER_SM": 8, "EVICT_FIRST": False}
SEARCH_SPACE = {"THREADS": [128, 256, 512, 1024], "VEC_BYTES": [4, 8, 16], "BLOCKS_PER_SM": [4, 8, 16, 32],
                "EVICT_FIRST": [False, True]}
# EVICT_FIRST: x's two halves (each read once) are loaded evict-first (ld.global.cs); cos and sin, read by every
# (batch, head) row of a position, keep the default policy. Off: on an H100 (2026-12-06, round rotary21, bf16
# 2x32x4096x128, alternating) 53.4-54.3 us against the default's 52.8-53.2 (5 of 5 steady pairs slower).

# nvrtc.PRELUDE (autokernel_ci/prelude.cuh) comes first: <cuda_fp16.h>, <cuda_bf16.h>, INFINITY, to_float(x),
# from_float<T>(f), Vec<T, N> (one aligned 4/8/16-byte access), warp_sum(v), group_sum<WPR>(v, red).
# Compiler error lines count from the r""" line below (the prelude ends with #line 1).
CUDA_SOURCE = nvrtc.PRELUDE + r"""
template <typename T, int VEC>
__device__ __forceinline__ void rope(T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ cs,
                                     const T* __restrict__ sn, long long rows, int seq, int half) {
    using V = Vec<T, VEC>;
    const int per_row = half / VEC;  // the host picks VEC so that VEC divides D/2
    const long long total = rows * per_row;
    for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < total;
         g += (long long)gridDim.x * blockDim.x) {
        const long long r = g / per_row;
        const int j = (int)(g - r * per_row) * VEC;
        const int s = (int)(r % seq);
        const long long off = r * 2 * half + j;
        const V a = load_vec<EVICT_FIRST>(reinterpret_cast<const V*>(x + off));
        const V b = load_vec<EVICT_FIRST>(reinterpret_cast<const V*>(x + off + half));
        const V c = *reinterpret_cast<const V*>(cs + (long long)s * half + j);
        const V d = *reinterpret_cast<const V*>(sn + (long long)s * half + j);
        V lo, hi;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const float x1 = to_float(a.v[k]), x2 = to_float(b.v[k]), co = to_float(c.v[k]), si = to_float(d.v[k]);
            lo.v[k] = from_float<T>(x1 * co - x2 * si);
            hi.v[k] = from_float<T>(x2 * co + x1 * si);
        }
        *reinterpret_cast<V*>(y + off) = lo;
        *reinterpret_cast<V*>(y + off + half) = hi;
    }
}

#define VEC_OF(T) ((int)(VEC_BYTES / sizeof(T)) > 0 ? (int)(VEC_BYTES / sizeof(T)) : 1)
#define ROPE_KERNEL(NAME, T, VEC)                                                                            \
    extern "C" __global__ void __launch_bounds__(THREADS) rotary_##NAME(                                     \
        T* __restrict__ y, const T* __restrict__ x, const T* __restrict__ cs, const T* __restrict__ sn,      \
        long long rows, int seq, int half) {                                                                 \
        rope<T, VEC>(y, x, cs, sn, rows, seq, half);                                                         \
    }
#define ROPE_DTYPE(SUFFIX, T)              \
    ROPE_KERNEL(SUFFIX##_v, T, VEC_OF(T))  \
    ROPE_KERNEL(SUFFIX##_s, T, 1)

ROPE_DTYPE(f32, float)
ROPE_DTYPE(f16, __half)
ROPE_DTYPE(bf16, __nv_bfloat16)
"""

_SUFFIX = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def _defines():
    return {"THREADS": CONFIG["THREADS"], "VEC_BYTES": CONFIG["VEC_BYTES"], "EVICT_FIRST": int(CONFIG["EVICT_FIRST"])}


def cuda_builds():
    """(source, defines, kernel names) of every build kernel_fn may request (the tests compile each)."""
    return [(CUDA_SOURCE, _defines(), [f"rotary_{s}_{v}" for s in _SUFFIX.values() for v in "sv"])]


def kernel_fn(x, cos, sin):
    b, h, s, d = x.shape
    half = d // 2
    xc = x.contiguous()
    cs = cos.to(x.dtype).contiguous()
    sn = sin.to(x.dtype).contiguous()
    y = torch.empty_like(xc)
    rows = b * h * s
    if rows == 0 or half == 0:
        return y
    vec_bytes = CONFIG["VEC_BYTES"]
    vec = max(vec_bytes // x.element_size(), 1)
    aligned = half % vec == 0 and all(t.data_ptr() % vec_bytes == 0 for t in (xc, cs, sn, y))
    vec = vec if aligned else 1
    threads = CONFIG["THREADS"]
    work = rows * (half // vec)
    sms = nvrtc.sm_count(x.device)
    grid = max(1, min(-(-work // threads), sms * CONFIG["BLOCKS_PER_SM"]))
    name = f"rotary_{_SUFFIX[x.dtype]}_{'v' if aligned else 's'}"
    kernel = nvrtc.compile_kernel(CUDA_SOURCE, name, defines=_defines(), source_name="rotary_embedding.cu")
    nvrtc.launch(kernel, grid=(grid,), block=(threads,),
                 args=(y, xc, cs, sn, nvrtc.i64(rows), nvrtc.i32(s), nvrtc.i32(half)))
    return y
