"""Flash attention (causal or not, grouped-query heads), CUDA C++ (NVRTC): WMMA tensor cores + online softmax.

One block handles 16*WARPS query rows of one (batch, head); each warp owns 16 rows, keeps its Q
slice in WMMA fragments and its output rows in fp32 registers. For every BLOCK_N keys: K and V
tiles are staged in shared memory (16-byte loads, zero-filled past S), S = Q K^T on tensor cores,
an exp2-based online softmax (running max and sum in fp32, masked and causal entries exactly 0),
then O += P V on tensor cores, rescaled by the running max. Causal blocks stop at the diagonal.
bf16/fp16 use m16n16k16 WMMA; fp32 uses TF32 (m16n16k8). HEAD_DIM must be a multiple of 16, <= 128.
A plain mma.sync kernel without wgmma/TMA: well below SDPA's FlashAttention on H100/H200.
"""

import math

import torch

from autokernel_ci import nvrtc

KERNEL_TYPE = "flash_attention"
BACKEND = "cuda"
CONFIG = {"WARPS": 4, "BLOCK_N": 32}
SEARCH_SPACE = {"WARPS": [2, 4], "BLOCK_N": [16, 32]}  # larger tiles exceed 48 KiB at D=128 fp32

HEAD_DIMS = (16, 32, 64, 128)  # multiples of 16 (WMMA tile) whose tiles fit 48 KiB of shared memory

# nvrtc.PRELUDE (autokernel_ci/nvrtc.py) comes first: <cuda_fp16.h>, <cuda_bf16.h>, INFINITY, to_float(x),
# from_float<T>(f), Vec<T, N> (one aligned 4/8/16-byte access), warp_sum(v), group_sum<WPR>(v, red).
# Compiler error lines count from the r""" line below (the prelude ends with #line 1).
CUDA_SOURCE = nvrtc.PRELUDE + r"""
#include <mma.h>
using namespace nvcuda;

template <typename T> struct Mma;
template <> struct Mma<__half> { using In = __half; static constexpr int K = 16; };
template <> struct Mma<__nv_bfloat16> { using In = __nv_bfloat16; static constexpr int K = 16; };
template <> struct Mma<float> { using In = wmma::precision::tf32; static constexpr int K = 8; };

template <typename Frag>
__device__ __forceinline__ void to_tf32(Frag& f) {
#pragma unroll
    for (int t = 0; t < f.num_elements; ++t) f.x[t] = wmma::__float_to_tf32(f.x[t]);
}

constexpr int D = HEAD_DIM;
constexpr int THREADS = WARPS * 32;
constexpr int BLOCK_M = 16 * WARPS;
static_assert(D % 16 == 0 && D <= 128, "HEAD_DIM must be a multiple of 16 and at most 128");
static_assert(BLOCK_N % 16 == 0, "BLOCK_N must be a multiple of 16");

template <typename T>
struct Layout {
    static constexpr int LDK = D + 16 / (int)sizeof(T);  // 16-byte row padding (WMMA ldm rule)
    static constexpr int KV = BLOCK_N * LDK * (int)sizeof(T);
    static constexpr int S = WARPS * 16 * BLOCK_N * 4;
    static constexpr int P = sizeof(T) == 4 ? 0 : WARPS * 16 * BLOCK_N * (int)sizeof(T);  // fp32: P overwrites S
    static constexpr int O = WARPS * 16 * 16 * 4;
    static constexpr int BYTES = 2 * KV + S + P + O;
    static_assert(BYTES <= 48 * 1024, "tiles exceed 48 KiB of static shared memory: lower WARPS or BLOCK_N");
};

template <typename T>
__device__ __forceinline__ void attention(T* __restrict__ out, const T* __restrict__ q, const T* __restrict__ k,
                                          const T* __restrict__ v, int heads, int kv_heads, int seq, int causal,
                                          float scale_log2) {
    using L = Layout<T>;
    using In = typename Mma<T>::In;
    constexpr int MK = Mma<T>::K;
    constexpr int VEC = 16 / (int)sizeof(T);
    constexpr int CPL = BLOCK_N / 2;  // score columns per lane: two lanes per row
    __shared__ __align__(128) unsigned char smem[L::BYTES];

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int bh = blockIdx.y, b = bh / heads, h = bh % heads, hk = h / (heads / kv_heads);
    const long long qbase = ((long long)b * heads + h) * seq * D;
    const long long kbase = ((long long)b * kv_heads + hk) * seq * D;
    const int q0 = blockIdx.x * BLOCK_M, qw = q0 + warp * 16;
    const int my_row = lane >> 1, half = lane & 1, qi = qw + my_row;

    T* Ks = reinterpret_cast<T*>(smem);
    T* Vs = reinterpret_cast<T*>(smem + L::KV);
    float* Sw = reinterpret_cast<float*>(smem + 2 * L::KV) + warp * 16 * BLOCK_N;
    T* Pw = sizeof(T) == 4 ? reinterpret_cast<T*>(Sw)
                           : reinterpret_cast<T*>(smem + 2 * L::KV + L::S) + warp * 16 * BLOCK_N;
    float* Ow = reinterpret_cast<float*>(smem + 2 * L::KV + L::S + L::P) + warp * 256;

    // This warp's 16 query rows as WMMA fragments (staged through Ow, zero past the sequence end).
    wmma::fragment<wmma::matrix_a, 16, 16, MK, In, wmma::row_major> qf[D / MK];
    T* stage = reinterpret_cast<T*>(Ow);
#pragma unroll
    for (int c = 0; c < D / MK; ++c) {
        for (int e = lane; e < 16 * MK; e += 32) {
            const int r = qw + e / MK;
            stage[e] = r < seq ? q[qbase + (long long)r * D + c * MK + e % MK] : from_float<T>(0.f);
        }
        __syncwarp();
        wmma::load_matrix_sync(qf[c], stage, MK);
        if constexpr (sizeof(T) == 4) to_tf32(qf[c]);
        __syncwarp();
    }

    float m_i = -INFINITY, l_i = 0.f;
    float o[D / 2];
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;

    const int kend = causal ? min(seq, q0 + BLOCK_M) : seq;
    for (int k0 = 0; k0 < kend; k0 += BLOCK_N) {
        __syncthreads();  // every warp is done with the previous K/V tile
        for (int idx = threadIdx.x; idx < BLOCK_N * D / VEC; idx += THREADS) {
            const int r = idx / (D / VEC), c = (idx % (D / VEC)) * VEC, key = k0 + r;
            Vec<T, VEC> kv, vv;
            if (key < seq) {
                kv = *reinterpret_cast<const Vec<T, VEC>*>(k + kbase + (long long)key * D + c);
                vv = *reinterpret_cast<const Vec<T, VEC>*>(v + kbase + (long long)key * D + c);
            } else {
#pragma unroll
                for (int t = 0; t < VEC; ++t) { kv.v[t] = from_float<T>(0.f); vv.v[t] = from_float<T>(0.f); }
            }
            *reinterpret_cast<Vec<T, VEC>*>(Ks + r * L::LDK + c) = kv;
            *reinterpret_cast<Vec<T, VEC>*>(Vs + r * L::LDK + c) = vv;
        }
        __syncthreads();

        // S = Q K^T (16 x BLOCK_N for this warp), fp32 accumulate.
#pragma unroll
        for (int nf = 0; nf < BLOCK_N / 16; ++nf) {
            wmma::fragment<wmma::accumulator, 16, 16, MK, float> s;
            wmma::fill_fragment(s, 0.f);
#pragma unroll
            for (int c = 0; c < D / MK; ++c) {
                wmma::fragment<wmma::matrix_b, 16, 16, MK, In, wmma::col_major> kb;
                wmma::load_matrix_sync(kb, Ks + nf * 16 * L::LDK + c * MK, L::LDK);
                if constexpr (sizeof(T) == 4) to_tf32(kb);
                wmma::mma_sync(s, qf[c], kb, s);
            }
            wmma::store_matrix_sync(Sw + nf * 16, s, BLOCK_N, wmma::mem_row_major);
        }
        __syncwarp();

        // Online softmax in base 2: lanes 2r and 2r+1 share row r.
        float sv[CPL];
        float mx = -INFINITY;
#pragma unroll
        for (int t = 0; t < CPL; ++t) {
            const int col = half * CPL + t, key = k0 + col;
            const bool keep = key < seq && (!causal || key <= qi);
            sv[t] = keep ? Sw[my_row * BLOCK_N + col] * scale_log2 : -INFINITY;
            mx = fmaxf(mx, sv[t]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float m_new = fmaxf(m_i, mx);
        const float alpha = (m_i == -INFINITY) ? 0.f : exp2f(m_i - m_new);
        float psum = 0.f;
#pragma unroll
        for (int t = 0; t < CPL; ++t) {
            const float p = (sv[t] == -INFINITY) ? 0.f : exp2f(sv[t] - m_new);
            psum += p;
            Pw[my_row * BLOCK_N + half * CPL + t] = from_float<T>(p);
        }
        psum += __shfl_xor_sync(0xffffffffu, psum, 1);
        l_i = l_i * alpha + psum;
        m_i = m_new;
#pragma unroll
        for (int i = 0; i < D / 2; ++i) o[i] *= alpha;
        __syncwarp();

        // O += P V, one 16-column chunk of D at a time through the warp's staging tile.
#pragma unroll
        for (int dc = 0; dc < D / 16; ++dc) {
            wmma::fragment<wmma::accumulator, 16, 16, MK, float> pv;
            wmma::fill_fragment(pv, 0.f);
#pragma unroll
            for (int kn = 0; kn < BLOCK_N; kn += MK) {
                wmma::fragment<wmma::matrix_a, 16, 16, MK, In, wmma::row_major> pa;
                wmma::fragment<wmma::matrix_b, 16, 16, MK, In, wmma::row_major> vb;
                wmma::load_matrix_sync(pa, Pw + kn, BLOCK_N);
                wmma::load_matrix_sync(vb, Vs + kn * L::LDK + dc * 16, L::LDK);
                if constexpr (sizeof(T) == 4) { to_tf32(pa); to_tf32(vb); }
                wmma::mma_sync(pv, pa, vb, pv);
            }
            wmma::store_matrix_sync(Ow, pv, 16, wmma::mem_row_major);
            __syncwarp();
#pragma unroll
            for (int t = 0; t < 8; ++t) o[dc * 8 + t] += Ow[my_row * 16 + half * 8 + t];
            __syncwarp();
        }
    }

    if (qi < seq) {
        const float inv = 1.f / l_i;
        T* orow = out + qbase + (long long)qi * D;
#pragma unroll
        for (int dc = 0; dc < D / 16; ++dc)
#pragma unroll
            for (int t = 0; t < 8; ++t) orow[dc * 16 + half * 8 + t] = from_float<T>(o[dc * 8 + t] * inv);
    }
}

#define ATTN_KERNEL(SUFFIX, T)                                                                                \
    extern "C" __global__ void __launch_bounds__(THREADS) flash_attention_##SUFFIX(                          \
        T* __restrict__ out, const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,      \
        int heads, int kv_heads, int seq, int causal, float scale_log2) {                                    \
        attention<T>(out, q, k, v, heads, kv_heads, seq, causal, scale_log2);                                \
    }
ATTN_KERNEL(f32, float)
ATTN_KERNEL(f16, __half)
ATTN_KERNEL(bf16, __nv_bfloat16)
"""

_SUFFIX = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def _defines(head_dim):
    return {"HEAD_DIM": head_dim, "WARPS": CONFIG["WARPS"], "BLOCK_N": CONFIG["BLOCK_N"]}


def cuda_builds():
    """(source, defines, kernel names) of every build kernel_fn may request (the tests compile each)."""
    return [(CUDA_SOURCE, _defines(d), [f"flash_attention_{s}" for s in _SUFFIX.values()]) for d in HEAD_DIMS]


def _aligned(t):
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()  # 16-byte vector loads need 16-byte aligned rows


def kernel_fn(q, k, v, causal, sm_scale):
    b, h, s, d = q.shape
    hkv = k.shape[1]
    if d not in HEAD_DIMS:
        raise ValueError(f"head dim D={d} is not supported by this kernel: use one of {HEAD_DIMS}")
    if h % hkv:
        raise ValueError(f"H={h} is not a multiple of Hkv={hkv}")
    qc, kc, vc = _aligned(q), _aligned(k.to(q.dtype)), _aligned(v.to(q.dtype))
    out = torch.empty_like(qc)
    if b * h * s == 0:
        return out
    kernel = nvrtc.compile_kernel(CUDA_SOURCE, f"flash_attention_{_SUFFIX[q.dtype]}", defines=_defines(d),
                                  source_name="flash_attention.cu")
    block_m = 16 * CONFIG["WARPS"]
    nvrtc.launch(kernel, grid=(math.ceil(s / block_m), b * h), block=(32 * CONFIG["WARPS"],),
                 args=(out, qc, kc, vc, nvrtc.i32(h), nvrtc.i32(hkv), nvrtc.i32(s), nvrtc.i32(int(bool(causal))),
                       nvrtc.f32(float(sm_scale) * math.log2(math.e))))
    return out
