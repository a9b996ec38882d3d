"""Cross entropy (mean over rows, ignore_index=-100), CUDA C++ (NVRTC): one row per block, logits read once.

Each thread folds its 16-byte vectors of the row, UNROLL of them loaded at a time, into a running
(max, sum of exp) pair in fp32 (one rescale a chunk, one SFU exp2 a logit); the pairs are merged with
warp shuffles and loss = (max - logit[target]) + log(sum) is written per row (0 for ignored rows).
A second one-block kernel sums the M row losses and counts the valid rows in a fixed order, and divides.
"""


import torch

from autokernel_ci import nvrtc

KERNEL_TYPE = "cross_entropy"
BACKEND = "cuda"
CONFIG = {"THREADS": 256, "VEC_BYTES": 16, "UNROLL": 4, "MIN_BLOCKS": 1, "EVICT_FIRST": False}
SEARCH_SPACE = {"THREADS": [128, 256, 512, 1024], "VEC_BYTES": [4, 8, 16], "UNROLL": [1, 2, 4, 8],
                "MIN_BLOCKS": [1, 2, 4, 8], "EVICT_FIRST": [False, True]}
# EVICT_FIRST: the row's vectors are loaded evict-first (ld.global.cs): each is read once. Off: on an H100 (round
# evict15) it took 80 -> 95 registers at UNROLL 4 and ran 192.1 against 176.8 us (bf16 8192 x 32000), 281 against
# 269 us (fp16 8192 x 50257); at UNROLL 2 the same 176.6 us.
# MIN_BLOCKS: __launch_bounds__'s blocks an SM, i.e. a register cap (65536 / (THREADS * MIN_BLOCKS)); a row's bytes in
# flight are THREADS * UNROLL * 16 and the SM's are that times the blocks that fit.

IGNORE_INDEX = -100
MEAN_THREADS = 1024  # one block sums the M row losses (M = 8192 for LLaMA: 8 loads a thread)

# nvrtc.PRELUDE (autokernel_ci/prelude.cuh) comes first: <cuda_fp16.h>, <cuda_bf16.h>, INFINITY, to_float(x),
# from_float<T>(f), Vec<T, N> (one aligned 4/8/16-byte access), warp_sum(v), group_sum<WPR>(v, red).
# Compiler error lines count from the r""" line below (the prelude ends with #line 1).
CUDA_SOURCE = nvrtc.PRELUDE + r"""
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
    // A target outside [0, V) has no logit: NaN, so the harness reports it instead of reading out of bounds.
    const bool in_range = t >= 0 && t < v;
    // The target's logit is loaded before the scan, so its latency hides behind the row's.
    const float picked = (threadIdx.x == 0 && in_range) ? to_float(xr[t]) : 0.f;
    OnlineLse lse;  // (max, sum of exp) over the row, UNROLL vectors a thread in flight (nvrtc.PRELUDE)
    scan_row<T, VEC, UNROLL, EVICT_FIRST>(xr, v, threadIdx.x, THREADS, lse);
    float m = lse.m, s = lse.s;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float om = __shfl_xor_sync(0xffffffffu, m, o);
        const float os = __shfl_xor_sync(0xffffffffu, s, o);
        online_merge(m, s, om, os);
    }
    const int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) { red_m[warp] = m; red_s[warp] = s; }
    __syncthreads();
    if (threadIdx.x == 0) {
        float bm = -INFINITY, bs = 0.f;
        for (int i = 0; i < THREADS / 32; ++i) online_merge(bm, bs, red_m[i], red_s[i]);
        loss[row] = in_range ? (bm - picked) + logf(bs) : __int_as_float(0x7fc00000);
    }
}

// mean = sum of the row losses / rows whose target is not IGNORE_INDEX, one block in a fixed order (bitwise
// deterministic); in place of torch's sum, ne, sum and divide (four launches of a few us each after a ~150 us scan).
// The count is a float: exact to 2^24 rows. No valid row: 0 / 0 = NaN, as torch's mean reduction gives.
__device__ __forceinline__ void ce_mean(float* __restrict__ out, const float* __restrict__ loss,
                                        const long long* __restrict__ targets, int rows) {
    __shared__ float red[MEAN_THREADS / 32];
    float sum = 0.f, count = 0.f;
    for (int i = threadIdx.x; i < rows; i += MEAN_THREADS) {
        sum += loss[i];
        count += targets[i] != IGNORE_INDEX ? 1.f : 0.f;
    }
    sum = group_sum<MEAN_THREADS / 32>(sum, red);
    count = group_sum<MEAN_THREADS / 32>(count, red);
    if (threadIdx.x == 0) out[0] = sum / count;
}

#define CE_KERNEL(SUFFIX, T)                                                                                \
    extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) cross_entropy_##SUFFIX(               \
        float* __restrict__ loss, const T* __restrict__ logits, const long long* __restrict__ targets,     \
        int rows, int v) {                                                                                  \
        ce_row<T>(loss, logits, targets, rows, v);                                                          \
    }
CE_KERNEL(f32, float)
CE_KERNEL(f16, __half)
CE_KERNEL(bf16, __nv_bfloat16)
extern "C" __global__ void __launch_bounds__(MEAN_THREADS) cross_entropy_mean(
    float* __restrict__ out, const float* __restrict__ loss, const long long* __restrict__ targets, int rows) {
    ce_mean(out, loss, targets, rows);
}
"""

_SUFFIX = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def _defines():
    return {"THREADS": CONFIG["THREADS"], "VEC_BYTES": CONFIG["VEC_BYTES"], "UNROLL": CONFIG["UNROLL"],
            "EVICT_FIRST": int(CONFIG["EVICT_FIRST"]), "MIN_BLOCKS": CONFIG["MIN_BLOCKS"], "IGNORE_INDEX": IGNORE_INDEX,
            "MEAN_THREADS": MEAN_THREADS}


def cuda_builds():
    """(source, defines, kernel names) of every build kernel_fn may request (the tests compile each)."""
    return [(CUDA_SOURCE, _defines(), [f"cross_entropy_{s}" for s in (*_SUFFIX.values(), "mean")])]


def kernel_fn(logits, targets):
    rows, v = logits.shape
    x = logits.contiguous()
    t = targets.to(torch.int64).contiguous()
    losses = torch.empty((rows,), dtype=torch.float32, device=logits.device)
    out = torch.empty((), dtype=torch.float32, device=logits.device)
    if rows == 0:
        return out.fill_(float("nan"))  # the mean of no rows, as torch gives
    kernel = nvrtc.compile_kernel(CUDA_SOURCE, f"cross_entropy_{_SUFFIX[logits.dtype]}", defines=_defines(),
                                  source_name="cross_entropy.cu")
    nvrtc.launch(kernel, grid=(rows,), block=(CONFIG["THREADS"],), args=(losses, x, t, nvrtc.i32(rows), nvrtc.i32(v)))
    mean = nvrtc.compile_kernel(CUDA_SOURCE, "cross_entropy_mean", defines=_defines(), source_name="cross_entropy.cu")
    nvrtc.launch(mean, grid=(1,), block=(MEAN_THREADS,), args=(out, losses, t, nvrtc.i32(rows)))
    return out
