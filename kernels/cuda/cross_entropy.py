"""Cross entropy (mean over rows, ignore_index=-100), CUDA C++ (NVRTC): one row per block, logits read once.

Each thread folds its 16-byte vectors of the row into a running (max, sum of exp) pair in fp32;
the pairs are merged with warp shuffles and loss = (max - logit[target]) + log(sum) is written per
row (0 for ignored rows). The mean over the M per-row losses is a torch sum and divide (allowed).
"""


import torch

from autokernel_ci import nvrtc

KERNEL_TYPE = "cross_entropy"
BACKEND = "cuda"
CONFIG = {"THREADS": 512, "VEC_BYTES": 16}
SEARCH_SPACE = {"THREADS": [128, 256, 512, 1024], "VEC_BYTES": [4, 8, 16]}

IGNORE_INDEX = -100

# nvrtc.PRELUDE (autokernel_ci/nvrtc.py) comes first: <cuda_fp16.h>, <cuda_bf16.h>, INFINITY, to_float(x),
# from_float<T>(f), Vec<T, N> (one aligned 4/8/16-byte access), warp_sum(v), group_sum<WPR>(v, red).
# Compiler error lines count from the r""" line below (the prelude ends with #line 1).
CUDA_SOURCE = nvrtc.PRELUDE + r"""
// Visit every element of a row once as fp32: a few scalar loads up to the first 16-byte boundary,
// then aligned vectors, then the scalar tail. Works for any row length and any row start, so
// rows of odd length (V = 50257) still get vector loads.
template <typename T, int VEC, typename F>
__device__ __forceinline__ void scan_row(const T* __restrict__ row, int n, int tid, int nthreads, F f) {
    int head = 0;
    if (VEC > 1) {
        const int mis = (int)((reinterpret_cast<unsigned long long>(row) / sizeof(T)) % VEC);
        head = mis ? min(n, VEC - mis) : 0;
    }
    for (int i = tid; i < head; i += nthreads) f(to_float(row[i]));
    const int nvec = (n - head) / VEC;
    const Vec<T, VEC>* body = reinterpret_cast<const Vec<T, VEC>*>(row + head);
    for (int i = tid; i < nvec; i += nthreads) {
        const Vec<T, VEC> v = body[i];
#pragma unroll
        for (int k = 0; k < VEC; ++k) f(to_float(v.v[k]));
    }
    for (int i = head + nvec * VEC + tid; i < n; i += nthreads) f(to_float(row[i]));
}
__device__ __forceinline__ void merge(float& m, float& s, float om, float os) {
    const float nm = fmaxf(m, om);
    const float a = (m == -INFINITY) ? 0.f : s * expf(m - nm);
    const float b = (om == -INFINITY) ? 0.f : os * expf(om - nm);
    m = nm;
    s = a + b;
}

template <typename T>
__device__ __forceinline__ void ce_row(float* __restrict__ loss, const T* __restrict__ logits,
                                       const long long* __restrict__ targets, int rows, int v) {
    __shared__ float red_m[THREADS / 32], red_s[THREADS / 32];
    constexpr int VEC = (int)(VEC_BYTES / sizeof(T)) > 0 ? (int)(VEC_BYTES / sizeof(T)) : 1;
    const int row = blockIdx.x;
    const long long t = targets[row];
    if (t == IGNORE_INDEX) {  // uniform across the block: no thread reaches a barrier
        if (threadIdx.x == 0) loss[row] = 0.f;
        return;
    }
    const T* xr = logits + (long long)row * v;
    float m = -INFINITY, s = 0.f;
    scan_row<T, VEC>(xr, v, threadIdx.x, THREADS, [&](float f) {
        if (f > m) { s = (m == -INFINITY) ? 0.f : s * expf(m - f); m = f; }
        if (f != -INFINITY) s += expf(f - m);
    });
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float om = __shfl_xor_sync(0xffffffffu, m, o);
        const float os = __shfl_xor_sync(0xffffffffu, s, o);
        merge(m, s, om, os);
    }
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) { red_m[warp] = m; red_s[warp] = s; }
    __syncthreads();
    if (threadIdx.x == 0) {
        float bm = -INFINITY, bs = 0.f;
        for (int i = 0; i < THREADS / 32; ++i) merge(bm, bs, red_m[i], red_s[i]);
        // A target outside [0, V) has no logit: NaN, so the harness reports it instead of reading out of bounds.
        loss[row] = (t < 0 || t >= v) ? __int_as_float(0x7fc00000) : (bm - to_float(xr[t])) + logf(bs);
    }
}

#define CE_KERNEL(SUFFIX, T)                                                                                \
    extern "C" __global__ void __launch_bounds__(THREADS) cross_entropy_##SUFFIX(                          \
        float* __restrict__ loss, const T* __restrict__ logits, const long long* __restrict__ targets,     \
        int rows, int v) {                                                                                  \
        ce_row<T>(loss, logits, targets, rows, v);                                                          \
    }
CE_KERNEL(f32, float)
CE_KERNEL(f16, __half)
CE_KERNEL(bf16, __nv_bfloat16)
"""

_SUFFIX = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def _defines():
    return {"THREADS": CONFIG["THREADS"], "VEC_BYTES": CONFIG["VEC_BYTES"], "IGNORE_INDEX": IGNORE_INDEX}


def cuda_builds():
    """(source, defines, kernel names) of every build kernel_fn may request (the tests compile each)."""
    return [(CUDA_SOURCE, _defines(), [f"cross_entropy_{s}" for s in _SUFFIX.values()])]


def kernel_fn(logits, targets):
    rows, v = logits.shape
    x = logits.contiguous()
    t = targets.to(torch.int64).contiguous()
    losses = torch.empty((rows,), dtype=torch.float32, device=logits.device)
    if rows > 0:
        kernel = nvrtc.compile_kernel(CUDA_SOURCE, f"cross_entropy_{_SUFFIX[logits.dtype]}", defines=_defines(),
                                      source_name="cross_entropy.cu")
        nvrtc.launch(kernel, grid=(rows,), block=(CONFIG["THREADS"],), args=(losses, x, t, nvrtc.i32(rows),
                                                                            nvrtc.i32(v)))
    return losses.sum() / t.ne(IGNORE_INDEX).sum()
