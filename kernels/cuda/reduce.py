"""Row sum, CUDA C++ (NVRTC): one row per block (or per warp for short rows), 16-byte loads, fp32 accumulation.

Every row is read once with aligned vector loads, UNROLL a thread in flight (scan_row in nvrtc.PRELUDE; a scalar
head and tail handle any row length and start), summed per thread in fp32, then across the row's warps with
shuffles in a fixed order (bitwise deterministic).
"""

import math

import torch

from autokernel_ci import nvrtc

KERNEL_TYPE = "reduce"
BACKEND = "cuda"
CONFIG = {"THREADS": 512, "VEC_BYTES": 16, "UNROLL": 2, "EVICT_FIRST": True, "SMALL_N": 2048, "PERSISTENT": 0}
# EVICT_FIRST: x's vectors are loaded evict-first (ld.global.cs), each being read once: on an H100 (round evict15,
# bf16 8192 x 8192, alternating) 50.7 us against 56.3 us without, the same-bytes copy's 49.9 us.
# THREADS 512 / UNROLL 2 (was 256 / 4; 2,048 threads an SM x 2 x 16 B = 64 KiB in flight, half as much): faster in 12
# of 12 alternating pairs on two H100s (2026-12-06, bf16 8192 x 8192: 49.7-50.7 us against 50.6-51.3, median 1.6%),
# 8/8 on every set. At GPT-2's 8192 x 768 both took 10.0-11.2 us: 12.6 MB in ~10 us is a third of the stream's rate,
# most likely the Python launch path's time (not profiled), so that shape decides nothing. Not yet on an H200.
SEARCH_SPACE = {
    "THREADS": [128, 256, 512, 1024],
    "VEC_BYTES": [4, 8, 16],
    "UNROLL": [1, 2, 4, 8],
    "EVICT_FIRST": [False, True],
    "SMALL_N": [0, 512, 1024, 2048, 4096],
    "PERSISTENT": [0, 2, 4, 8],
}
# PERSISTENT: 0 launches a block per row (per THREADS / 32 rows when narrow); k > 0 launches at most k blocks an SM
# (the "_p" kernels), each walking its row groups gridDim.x apart: no block launches after the first wave. Off
# (block launches are not what limits the stream): on an H100 (round read19, bf16 8192 x 8192, alternating)
# PERSISTENT 4 took 52.7 / 53.2 us against the default's 51.4 / 50.8.

# nvrtc.PRELUDE (autokernel_ci/prelude.cuh) comes first: <cuda_fp16.h>, <cuda_bf16.h>, INFINITY, to_float(x),
# from_float<T>(f), Vec<T, N> (one aligned 4/8/16-byte access), warp_sum(v), group_sum<WPR>(v, red).
# Compiler error lines count from the r""" line below (the prelude ends with #line 1).
CUDA_SOURCE = nvrtc.PRELUDE + r"""
// The row's running fp32 sum, fed by scan_row (nvrtc.PRELUDE) UNROLL vectors at a time.
struct RowSum {
    static __device__ __forceinline__ float pad() { return 0.f; }
    float acc = 0.f;
    template <int N> __device__ __forceinline__ void operator()(const float (&v)[N]) {
#pragma unroll
        for (int k = 0; k < N; ++k) acc += v[k];
    }
};
// The rows of row group `g` (THREADS / (WPR * 32) rows, WPR warps a row), summed into y.
template <typename T, int WPR>
__device__ __forceinline__ void sum_rows(T* __restrict__ y, const T* __restrict__ x, int rows, int n, int g) {
    __shared__ float red[THREADS / 32];
    constexpr int GROUP = WPR * 32;
    constexpr int VEC = (int)(VEC_BYTES / sizeof(T)) > 0 ? (int)(VEC_BYTES / sizeof(T)) : 1;
    const int tid = threadIdx.x % GROUP;
    const int row = g * (THREADS / GROUP) + threadIdx.x / GROUP;
    const bool valid = row < rows;
    RowSum sum;
    if (valid) scan_row<T, VEC, UNROLL, EVICT_FIRST>(x + (long long)row * n, n, tid, GROUP, sum);
    const float acc = group_sum<WPR>(sum.acc, red);  // syncs first: red[] is reused by a persistent block's next group
    if (valid && tid == 0) y[row] = from_float<T>(acc);
}

// A block per row group (_w: a row per block; _n: a warp per row), or (_wp / _np) gridDim.x blocks walking the
// `groups` row groups gridDim.x apart.
#define SUM_KERNEL(NAME, T, WPR)                                                                        \
    extern "C" __global__ void __launch_bounds__(THREADS) reduce_##NAME(T* __restrict__ y, const T* __restrict__ x, \
                                                                        int rows, int n) {              \
        sum_rows<T, WPR>(y, x, rows, n, blockIdx.x);                                                    \
    }                                                                                                   \
    extern "C" __global__ void __launch_bounds__(THREADS) reduce_##NAME##p(T* __restrict__ y,           \
                                                                           const T* __restrict__ x,     \
                                                                           int rows, int n, int groups) { \
        for (int g = blockIdx.x; g < groups; g += gridDim.x) sum_rows<T, WPR>(y, x, rows, n, g);        \
    }
#define SUM_DTYPE(SUFFIX, T)                  \
    SUM_KERNEL(SUFFIX##_w, T, THREADS / 32)   \
    SUM_KERNEL(SUFFIX##_n, T, 1)

SUM_DTYPE(f32, float)
SUM_DTYPE(f16, __half)
SUM_DTYPE(bf16, __nv_bfloat16)
"""

_SUFFIX = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def _defines():
    return {"THREADS": CONFIG["THREADS"], "VEC_BYTES": CONFIG["VEC_BYTES"], "UNROLL": CONFIG["UNROLL"],
            "EVICT_FIRST": int(CONFIG["EVICT_FIRST"])}


def cuda_builds():
    """(source, defines, kernel names) of every build kernel_fn may request (the tests compile each)."""
    names = [f"reduce_{s}_{w}{p}" for s in _SUFFIX.values() for w in "nw" for p in ("", "p")]
    return [(CUDA_SOURCE, _defines(), names)]


def kernel_fn(x):
    n = x.shape[-1]
    x2 = x.contiguous().view(-1, n)
    rows = x2.shape[0]
    y = torch.empty((rows,), dtype=x.dtype, device=x.device)
    if rows == 0:
        return y.view(x.shape[:-1])
    if n == 0:
        return y.zero_().view(x.shape[:-1])
    wide = n > CONFIG["SMALL_N"]
    threads = CONFIG["THREADS"]
    rows_per_block = 1 if wide else threads // 32
    groups = math.ceil(rows / rows_per_block)
    name = f"reduce_{_SUFFIX[x.dtype]}_{'w' if wide else 'n'}"
    grid, args = groups, (y, x2, nvrtc.i32(rows), nvrtc.i32(n))
    if CONFIG["PERSISTENT"]:
        sms = nvrtc.sm_count(x.device)
        name, grid, args = name + "p", min(groups, CONFIG["PERSISTENT"] * sms), args + (nvrtc.i32(groups),)
    kernel = nvrtc.compile_kernel(CUDA_SOURCE, name, defines=_defines(), source_name="reduce.cu")
    nvrtc.launch(kernel, grid=(grid,), block=(threads,), args=args)
    return y.view(x.shape[:-1])
