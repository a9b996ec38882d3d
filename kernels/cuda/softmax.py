"""Softmax over the last dim, CUDA C++ (NVRTC): one row per block (or per warp), 16-byte loads, row kept in registers.

One read of x: each thread folds any part of a wider row past its registers into a running (max, sum of
exp) pair (keeping up to ROW_SMEM_KB of those vectors in shared memory for the write), loads up to CACHE_VECS
vectors into registers (all loads in flight at once), takes their max, then one SFU exp2 per cached element
against its own max and keeps it; the pairs are merged with warp shuffles and each thread writes its kept exps
times 2^(own max - row max) / sum. Rows of any length take vectors (a scalar head and tail where a row starts
between vector boundaries). Masked (-inf) entries give exact zeros. Only the kernels for rows past the register
cache ("_r") carry the streaming loop and its registers.
"""

import math

import torch

from autokernel_ci import nvrtc

KERNEL_TYPE = "softmax"
BACKEND = "cuda"
# ROW_SMEM_KB: shared memory a block may use to keep the part of a wide row past its registers between the read and
# the write (the rows-per-block kernels of rows <= SMALL_N never need it). 100 KiB: two blocks an SM on sm_90 (227
# KiB a block, 228 an SM) hold a 50257-wide fp16 row each; 0 reads that part twice from memory. On an H100 (round
# round16, alternating with bc1752e's file, which read such rows one element at a time): fp16 2048 x 50257 338.2 ->
# 176.4 us (eager 204.3), 204.7 with ROW_SMEM_KB 0, 161.2 at UNROLL 4, 152.8 at 512 threads x UNROLL 4 (then slower at
# LLaMA's 8192: 210 us, half its cache empty); bf16 8192 x 8192 94.2-94.9 us for all of them, 94.8 for bc1752e. On
# the H200 (final16): UNROLL 2 144.5 us against 277.4 (eager 182.7); UNROLL 4 131.8 us but the 8192-wide LLaMA row 80.8
# against 70.3 us, although that row never streams: the loop's registers (80 against 63) left 3 blocks an SM instead of
# 4. Since then only the "_r" kernels (rows past the register cache) carry the loop, and UNROLL is theirs alone (the
# others stay at 63-64 registers at UNROLL 2, 4 and 8; cuobjdump -res-usage, sm_90). On an H100, alternating with
# 9b28142's file (rounds round17, streamk): fp16 2048 x 50257 176.3-176.9 -> 160.5-161.3 us at UNROLL 4 (eager
# 204.3), UNROLL 2 as before; bf16 8192 x 8192 94.3-95.0 us for all. UNROLL 8: 156.6 us, but 182 registers for bf16
# (one block an SM).
CONFIG = {"THREADS": 256, "VEC_BYTES": 16, "CACHE_VECS": 4, "UNROLL": 4, "SMALL_N": 1024, "ROW_SMEM_KB": 100}
SEARCH_SPACE = {
    "THREADS": [128, 256, 512, 1024],
    "VEC_BYTES": [4, 8, 16],
    "CACHE_VECS": [1, 2, 4, 8],
    "UNROLL": [1, 2, 4, 8],
    "SMALL_N": [0, 512, 1024, 2048],
    "ROW_SMEM_KB": [0, 48, 100, 200],
}

# nvrtc.PRELUDE (autokernel_ci/prelude.cuh) comes first: <cuda_fp16.h>, <cuda_bf16.h>, INFINITY, to_float(x),
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

// REST: rows may be wider than the register cache (the launcher's n / VEC > CACHE_VECS x GROUP). The kernels without
// it have no streaming loop and none of its UNROLL x VEC registers: a row the registers hold never runs that loop, but
// its registers (80 at UNROLL 4 against 63 at 2) cost the 8192-wide LLaMA row a block an SM on the H200 (final16).
template <typename T, int VEC, int WPR, bool REST>
__device__ __forceinline__ void softmax_rows(T* __restrict__ y, const T* __restrict__ x, int rows, int n, int svecs) {
    __shared__ float red_m[THREADS / 32], red_s[THREADS / 32];
    // Vectors of a wide row past the register cache, kept from the first read for the write (svecs of them; the
    // launcher sizes it, 0 in the rows-per-warp kernels): the row is read from memory once instead of twice.
    extern __shared__ __align__(16) unsigned char row_smem[];
    constexpr int GROUP = WPR * 32;
    using V = Vec<T, VEC>;
    const int tid = threadIdx.x % GROUP;
    const int row = blockIdx.x * (THREADS / GROUP) + threadIdx.x / GROUP;
    const bool valid = row < rows;
    const long long base = (long long)(valid ? row : 0) * n;
    const T* xrow = x + base;
    T* yrow = y + base;
    const int len = valid ? n : 0;
    // Where VEC does not divide n (GPT-2's 50257) rows start between vector boundaries: the elements before the
    // first boundary (head) and past the last whole vector (tail), fewer than VEC each, go one at a time and the
    // body as vectors. x and y rows share the offset (the launcher checks both bases are VEC_BYTES aligned).
    // Scalar loads of the whole row, as before, ran the 2048 x 50257 fp16 softmax at 0.60x eager (H100).
    const int head = vec_head<T, VEC>(xrow, len);
    const int nvec = (len - head) / VEC;
    const int tail = head + nvec * VEC;
    const V* xr = reinterpret_cast<const V*>(xrow + head);
    V* yr = reinterpret_cast<V*>(yrow + head);
    V* kept = reinterpret_cast<V*>(row_smem);
    if (GROUP != THREADS) svecs = 0;  // several rows a block: no per-row shared buffer

    OnlineLse lse;
    for (int i = tid; i < head; i += GROUP) { const float one[1] = {to_float(xrow[i])}; lse(one); }
    for (int i = tail + tid; i < len; i += GROUP) { const float one[1] = {to_float(xrow[i])}; lse(one); }
    // A row wider than the registers: the rest streams through the online fold (scan_vecs, nvrtc.PRELUDE), UNROLL
    // vectors a thread in flight; its first svecs vectors are kept in shared memory, any others read again below. It
    // goes first: the cache is not yet live, so the kernel's registers are the larger of the two, not their sum (63
    // at UNROLL 2, 80 at 4). Each thread reads back only the vectors it kept (j = tid mod GROUP): no barrier needed.
    const int rest = REST ? nvec - CACHE_VECS * GROUP : 0;
    if (!REST && nvec > CACHE_VECS * GROUP) __trap();  // the launcher picked this kernel for a narrower row
    const V* xs = xr + CACHE_VECS * GROUP;
    scan_vecs<T, VEC, UNROLL>(xs, rest, tid, GROUP, lse, kept, svecs);  // rest 0 without REST: compiled out
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
    V* ys = yr + CACHE_VECS * GROUP;
#pragma unroll 4
    for (int j = tid; j < rest; j += GROUP) {
        const V v = j < svecs ? kept[j] : xs[j];
        V o;
#pragma unroll
        for (int k = 0; k < VEC; ++k) o.v[k] = from_float<T>(fast_exp2((to_float(v.v[k]) - m) * LOG2E) * inv);
        ys[j] = o;
    }
    for (int i = tid; i < head; i += GROUP) yrow[i] = from_float<T>(fast_exp2((to_float(xrow[i]) - m) * LOG2E) * inv);
    for (int i = tail + tid; i < len; i += GROUP)
        yrow[i] = from_float<T>(fast_exp2((to_float(xrow[i]) - m) * LOG2E) * inv);
}

#define VEC_OF(T) ((int)(VEC_BYTES / sizeof(T)) > 0 ? (int)(VEC_BYTES / sizeof(T)) : 1)
#define SOFTMAX_KERNEL(NAME, T, VEC, WPR, REST)                                                             \
    extern "C" __global__ void __launch_bounds__(THREADS) softmax_##NAME(T* __restrict__ y, const T* __restrict__ x, \
                                                                         int rows, int n, int svecs) {     \
        softmax_rows<T, VEC, WPR, REST>(y, x, rows, n, svecs);                                              \
    }
#define SOFTMAX_SHAPES(SUFFIX, T, REST)                               \
    SOFTMAX_KERNEL(SUFFIX##_v_w, T, VEC_OF(T), THREADS / 32, REST)    \
    SOFTMAX_KERNEL(SUFFIX##_s_w, T, 1, THREADS / 32, REST)            \
    SOFTMAX_KERNEL(SUFFIX##_v_n, T, VEC_OF(T), 1, REST)               \
    SOFTMAX_KERNEL(SUFFIX##_s_n, T, 1, 1, REST)
// "_r": the kernels with the streaming loop, for rows past the register cache.
#define SOFTMAX_DTYPE(SUFFIX, T)     \
    SOFTMAX_SHAPES(SUFFIX, T, false) \
    SOFTMAX_SHAPES(SUFFIX##_r, T, true)

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
    names = [f"softmax_{s}{r}_{v}_{w}" for s in _SUFFIX.values() for r in ("", "_r") for v in "sv" for w in "nw"]
    return [(CUDA_SOURCE, _defines(), names)]


def _kept_vectors(kernel, n: int, vec: int, elem: int, device: torch.device) -> int:
    """Vectors of a wide row past the register cache that the kernel keeps in shared memory (ROW_SMEM_KB, clipped to
    what a launch of it may ask for on this device): a row has at most n // vec whole vectors."""
    rest = n // vec - CONFIG["CACHE_VECS"] * CONFIG["THREADS"]
    if rest <= 0 or CONFIG["ROW_SMEM_KB"] <= 0:
        return 0
    budget = min(CONFIG["ROW_SMEM_KB"] * 1024, nvrtc.dynamic_shared_limit(kernel, device))
    return max(min(rest, budget // (vec * elem)), 0)


def _wide(n: int) -> bool:
    """One block a row (the "w" kernels) past SMALL_N elements, else one warp a row (several rows a block)."""
    return n > CONFIG["SMALL_N"]


def _kernel_name(dtype: torch.dtype, n: int, vec: int) -> str:
    """The kernel for rows of n elements taken vec at a time (1: a base off the vector boundary): one block a row past
    SMALL_N ("w"), else one warp; with the streaming loop ("_r") when a row's n // vec vectors, the most it can have,
    overflow the register cache (CACHE_VECS a thread)."""
    wide = _wide(n)
    rest = n // vec > CONFIG["CACHE_VECS"] * (CONFIG["THREADS"] if wide else 32)
    return f"softmax_{_SUFFIX[dtype]}{'_r' if rest else ''}_{'v' if vec > 1 else 's'}_{'w' if wide else 'n'}"


def kernel_fn(x):
    n = x.shape[-1]
    x2 = x.contiguous().view(-1, n)
    y = torch.empty_like(x2)
    rows = x2.shape[0]
    if rows == 0 or n == 0:
        return y.view(x.shape)
    vec_bytes = CONFIG["VEC_BYTES"]
    vec = max(vec_bytes // x.element_size(), 1)
    # Both bases aligned: every row of x and y starts at the same offset from a vector boundary (the kernel takes a
    # scalar head up to it), whatever n is.
    aligned = x2.data_ptr() % vec_bytes == 0 and y.data_ptr() % vec_bytes == 0
    if not aligned:
        vec = 1
    wide = _wide(n)
    threads = CONFIG["THREADS"]
    rows_per_block = 1 if wide else threads // 32
    name = _kernel_name(x.dtype, n, vec)
    kernel = nvrtc.compile_kernel(CUDA_SOURCE, name, defines=_defines(), source_name="softmax.cu")
    kept = _kept_vectors(kernel, n, vec, x.element_size(), x.device) if wide else 0
    nvrtc.launch(kernel, grid=(math.ceil(rows / rows_per_block),), block=(threads,),
                 args=(y, x2, nvrtc.i32(rows), nvrtc.i32(n), nvrtc.i32(kept)),
                 shared_mem=kept * vec * x.element_size())
    return y.view(x.shape)
