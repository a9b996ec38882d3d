// ---- autokernel_ci.nvrtc.PRELUDE: shared helpers (the kernel's own text follows) ----
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#ifndef INFINITY  // NVRTC has no <math.h>
#define INFINITY __int_as_float(0x7f800000)
#endif

// Storage type <-> fp32 (float, __half, __nv_bfloat16); from_float rounds to nearest even.
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// N elements loaded or stored as one aligned access (N * sizeof(T) bytes: 4, 8 or 16).
template <typename T, int N> struct alignas(sizeof(T) * N) Vec { T v[N]; };

// 2^x on the SFU (ex2.approx.ftz: ~2 ulp, one MUFU instruction; exp2f without fast-math adds denormal scaling
// around it, expf a range reduction too); 2^-inf = +0. e^(x - m) is fast_exp2((x - m) * LOG2E).
constexpr float LOG2E = 1.4426950408889634f;
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Sum over the 32 lanes of a warp; every lane gets the result.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the WPR warps that share a row; every thread of the group gets the same value.
template <int WPR>
__device__ __forceinline__ float group_sum(float v, float* red) {
    v = warp_sum(v);
    if (WPR == 1) return v;
    const int warp = threadIdx.x >> 5;
    __syncthreads();  // red[] may still be read by the previous reduction
    if ((threadIdx.x & 31) == 0) red[warp] = v;
    __syncthreads();
    const int first = (warp / WPR) * WPR;
    float t = 0.f;
#pragma unroll
    for (int i = 0; i < WPR; ++i) t += red[first + i];
    return t;
}

// Running (max m, sum s of e^(x - m)) pairs, the one-read log-sum-exp of softmax and cross entropy. m = -inf
// means nothing seen yet (s = 0); -inf entries add nothing. online_fold takes N values with one rescale.
__device__ __forceinline__ void online_merge(float& m, float& s, float om, float os) {
    const float nm = fmaxf(m, om);
    if (nm == -INFINITY) return;  // both empty
    s = s * fast_exp2((m - nm) * LOG2E) + os * fast_exp2((om - nm) * LOG2E);  // 2^-inf = 0 for an empty side
    m = nm;
}
template <int N>
__device__ __forceinline__ void online_fold(float& m, float& s, const float (&v)[N]) {
    float vm = v[0];
#pragma unroll
    for (int k = 1; k < N; ++k) vm = fmaxf(vm, v[k]);
    if (vm == -INFINITY) return;
    if (vm > m) { s *= fast_exp2((m - vm) * LOG2E); m = vm; }  // m = -inf: s is 0 and stays 0
    // (v - m) * LOG2E rather than fmaf(v, LOG2E, -m * LOG2E): x = m gives 2^0 = 1 exactly, and the fp32 error
    // stays ~1 ulp of the result for logits of any size (the fmaf form is off by m's rounding, 5e-6 at m = 100).
#pragma unroll
    for (int k = 0; k < N; ++k) s += fast_exp2((v[k] - m) * LOG2E);
}

// One vector load, plain or (STREAM) marked evict-first (ld.global.cs: data read once should not push out what
// is read again); 4-, 8- and 16-byte vectors, anything else loads plainly.
template <bool STREAM, typename V>
__device__ __forceinline__ V load_vec(const V* p) {
    if constexpr (STREAM && sizeof(V) == 16) {
        const uint4 r = __ldcs(reinterpret_cast<const uint4*>(p));
        return *reinterpret_cast<const V*>(&r);  // same size and alignment: the registers, renamed
    } else if constexpr (STREAM && sizeof(V) == 8) {
        const uint2 r = __ldcs(reinterpret_cast<const uint2*>(p));
        return *reinterpret_cast<const V*>(&r);  // same size and alignment: the registers, renamed
    } else if constexpr (STREAM && sizeof(V) == 4) {
        const unsigned int r = __ldcs(reinterpret_cast<const unsigned int*>(p));
        return *reinterpret_cast<const V*>(&r);  // same size and alignment: the registers, renamed
    } else {
        return *p;
    }
}

// One vector store, plain or (STREAM) marked evict-first (st.global.cs: an output nothing in the kernel reads back
// should not push out what is); 4-, 8- and 16-byte vectors, anything else stores plainly.
template <bool STREAM, typename V>
__device__ __forceinline__ void store_vec(V* p, const V& v) {
    if constexpr (STREAM && sizeof(V) == 16) {
        __stcs(reinterpret_cast<uint4*>(p), *reinterpret_cast<const uint4*>(&v));
    } else if constexpr (STREAM && sizeof(V) == 8) {
        __stcs(reinterpret_cast<uint2*>(p), *reinterpret_cast<const uint2*>(&v));
    } else if constexpr (STREAM && sizeof(V) == 4) {
        __stcs(reinterpret_cast<unsigned int*>(p), *reinterpret_cast<const unsigned int*>(&v));
    } else {
        *p = v;
    }
}

// The running pair as a scan_row functor (below): one rescale per call, one SFU exp2 per value.
struct OnlineLse {
    static __device__ __forceinline__ float pad() { return -INFINITY; }  // INFINITY is not constexpr in NVRTC
    float m = -INFINITY, s = 0.f;
    template <int N> __device__ __forceinline__ void operator()(const float (&v)[N]) { online_fold(m, s, v); }
};

// Elements of an n-long row before its first VEC-element (vector) boundary, at most n: where VEC does not divide a
// row length (GPT-2's 50257) rows start anywhere, and these go one at a time before the aligned vectors.
template <typename T, int VEC>
__device__ __forceinline__ int vec_head(const T* row, int n) {
    if (VEC == 1) return 0;
    const int mis = (int)((reinterpret_cast<unsigned long long>(row) / sizeof(T)) % VEC);
    return mis ? min(n, VEC - mis) : 0;
}

// Visit nvec vectors of a row once as fp32 (the vectors tid, tid + nthreads, ...), LOADS of them issued before any is
// used (bytes in flight, not one load's latency at a time). (LOADS, not UNROLL: a template parameter must not share
// a name with a kernel's -D define.) f is a functor with `template <int N> void operator()(const float (&v)[N])` and
// `static float pad()` (what a missing element reads as: 0 for a sum, -inf for a max); it sees LOADS * VEC values a
// call. STREAM: the vectors are loaded evict-first (load_vec). keep: vectors 0 .. nkeep - 1 are also copied there as
// read (the softmax keeps the part of a wide row past its registers in shared memory for its write); each thread
// stores only its own indices, so it may read them back without a barrier.
template <typename T, int VEC, int LOADS, bool STREAM = false, typename F>
__device__ __forceinline__ void scan_vecs(const Vec<T, VEC>* body, int nvec, int tid, int nthreads, F& f,
                                          Vec<T, VEC>* keep = nullptr, int nkeep = 0) {
    for (int i0 = tid; i0 < nvec; i0 += nthreads * LOADS) {
        Vec<T, VEC> raw[LOADS];
#pragma unroll
        for (int u = 0; u < LOADS; ++u)
            if (i0 + u * nthreads < nvec) raw[u] = load_vec<STREAM>(body + i0 + u * nthreads);
        float vals[LOADS * VEC];
#pragma unroll
        for (int u = 0; u < LOADS; ++u) {
            const int i = i0 + u * nthreads;
            const bool ok = i < nvec;
            if (ok && (unsigned)i < (unsigned)nkeep) keep[i] = raw[u];  // unsigned: nkeep 0 compiles it out
#pragma unroll
            for (int k = 0; k < VEC; ++k) vals[u * VEC + k] = ok ? to_float(raw[u].v[k]) : F::pad();
        }
        f(vals);
    }
}

// Visit every element of a row once as fp32: scalar loads up to the first VEC-element boundary, then the aligned
// vectors (scan_vecs), then the scalar tail; f sees 1 or LOADS * VEC values a call. Any row length and start: rows of
// odd length (V = 50257) still get vectors.
template <typename T, int VEC, int LOADS, bool STREAM = false, typename F>
__device__ __forceinline__ void scan_row(const T* __restrict__ row, int n, int tid, int nthreads, F& f) {
    const int head = vec_head<T, VEC>(row, n);
    for (int i = tid; i < head; i += nthreads) { const float one[1] = {to_float(row[i])}; f(one); }
    const int nvec = (n - head) / VEC;
    scan_vecs<T, VEC, LOADS, STREAM>(reinterpret_cast<const Vec<T, VEC>*>(row + head), nvec, tid, nthreads, f);
    for (int i = head + nvec * VEC + tid; i < n; i += nthreads) { const float one[1] = {to_float(row[i])}; f(one); }
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
// Tensor-core building blocks (sm_80+: cp.async, ldmatrix, mma.sync m16n8k16), shared by matmul and
// flash attention. Shared-memory operands are 32-bit shared-space byte addresses (smem_addr).
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy that bypasses L1; bytes < 16 zero-fills the rest (0: all zeros, nothing
// read): ragged edges become zeros without branches around the copy. dst and src 16-byte aligned.
__device__ __forceinline__ void cp_async16(unsigned dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>  // wait until at most N of this thread's commit groups are still in flight
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// fp32 on tf32 tensor cores with fp32 accuracy ("3xTF32"): x = hi + lo, both tf32 (10-bit mantissa), and
// a*b ~= a_hi*b_hi + a_hi*b_lo + a_lo*b_hi; the dropped lo*lo term is ~2^-22 of |a*b|. Plain tf32 rounds
// inputs to 2^-11 relative: attention scores of ~25 (q, k std 5) come out up to 0.023 off, 4.5x the fp32
// tolerance. split_tf32 works on any WMMA tf32 fragment (a float array x[] of num_elements).
__device__ __forceinline__ float tf32_round(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
}
template <typename Frag>
__device__ __forceinline__ void split_tf32(Frag& hi, Frag& lo) {
#pragma unroll
    for (int t = 0; t < hi.num_elements; ++t) {
        const float x = hi.x[t], h = tf32_round(x);
        // inf - inf would make lo NaN (x = +-inf, or within 2^-11 of FLT_MAX where h rounds up to inf): there hi
        // keeps x (the tensor core reads its top 10 mantissa bits) and lo is 0, so inf stays inf as in fp32.
        const bool finite = fabsf(h) < INFINITY;
        hi.x[t] = finite ? h : x;
        lo.x[t] = finite ? tf32_round(x - h) : 0.f;
    }
}

// Four 8x8 b16 matrices; lanes 8q..8q+7 give the row addresses of matrix q, register q receives it.
// Plain: lane l holds row l/4, cols 2(l%4), 2(l%4)+1. .trans: lane l holds rows 2(l%4), 2(l%4)+1 of col l/4.
__device__ __forceinline__ void ldsm_x4(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}
__device__ __forceinline__ void ldsm_x4_trans(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
}

// c[16x8] += a[16x16] * b[16x8], fp32 accumulate. Fragments (g = lane / 4, t = lane % 4):
// a: {a0,a1} = A[g][2t..2t+1], {a2,a3} = A[g+8][2t..], {a4,a5} = A[g][2t+8..], {a6,a7} = A[g+8][2t+8..]
// b: {b0,b1} = B[2t..2t+1][g], {b2,b3} = B[2t+8..2t+9][g]; c: {c0,c1} = C[g][2t..2t+1], {c2,c3} = C[g+8][2t..].
template <typename T>
__device__ __forceinline__ void mma16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1);
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                                        unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__half>(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif
// Hopper (sm_90a) building blocks, shared by matmul (Part 3) and flash attention (VARIANT "wgmma"): mbarrier,
// TMA tensor copies, wgmma descriptors / fences / commit / wait, and the wgmma instructions themselves (shared-memory
// A: Wgmma<T, N, TRANS_B>, register A: WgmmaRS<T, N, TRANS_B>; N = 64, 128 or 256 (256: shared-memory A only)).
// Compiled only for the arch-specific target (nvrtc.arch_specific: sm_90a), where __CUDA_ARCH_FEAT_SM90_ALL is set;
// elsewhere this block is empty and a kernel must keep its wgmma code under the same #if.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// mbarrier: shared-memory 64-bit barrier objects, addressed by 32-bit shared-space addresses.
__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// One arrival that also adds `bytes` to the transaction count the phase waits for (the TMA copies' complete_tx).
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Spin until the phase with this parity has completed (phases alternate 0, 1, 0, ...; the first one is 0).
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned parity) {
    unsigned done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}
// TMA: the box at element coordinates (c0 innermost, c1) of the tensor map at global address `map` -> shared `dst`;
// out-of-bounds elements arrive as zeros and still count: the barrier always receives the full box's bytes.
__device__ __forceinline__ void tma_load_2d(unsigned dst, const void* map, unsigned bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
        ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar) : "memory");
}
// The same box, written at the same shared-memory offset of every CTA of the cluster whose bit is set in cta_mask, each
// copy signalling the mbarrier at offset `bar` of its own CTA (so each CTA's barrier counts the bytes it receives).
__device__ __forceinline__ void tma_load_2d_multicast(unsigned dst, const void* map, unsigned bar, int c0, int c1,
                                                      unsigned short cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%2, %3}], [%4], %5;\n"
        ::"r"(dst), "l"(map), "r"(c0), "r"(c1), "r"(bar), "h"(cta_mask) : "memory");
}
// Thread-block clusters: this CTA's rank, an arrival on the mbarrier at the same offset in CTA `cta` of the cluster,
// and a barrier over every thread of every CTA of the cluster (release / acquire: shared-memory writes before it,
// mbarrier inits included, are visible to the other CTAs after it).
__device__ __forceinline__ unsigned cluster_ctarank() {
    unsigned rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    return rank;
}
// The arrival is .release at CTA scope (the default), not .release.cluster: it publishes no data (the arriving warp
// only read the stage, and its wgmma.wait_group has retired those reads), and a cluster-scope release is a memory
// barrier each time (ncu on the H200: 8.2 cycles of membar stall an instruction, the clustered GEMM 45% slower).
__device__ __forceinline__ void mbar_arrive_cluster(unsigned bar, unsigned cta) {
    asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n"
                 ::"r"(bar), "r"(cta) : "memory");
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// The maps were written by a host-to-device copy (generic proxy); TMA reads them through the tensormap proxy.
__device__ __forceinline__ void tensormap_acquire(const void* map) {
    asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(map) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}

// wgmma shared-memory matrix descriptor (PTX ISA "Matrix Descriptor"): bits 0-13 start address >> 4, 16-29 leading
// byte offset (LBO) >> 4, 32-45 stride byte offset (SBO) >> 4, 49-51 base offset (0: every tile starts on a 1024-byte
// boundary, and the K steps inside a tile move the start by 32 or 2048 bytes, which leaves address bits 7-9 at 0),
// 62-63 swizzle mode (1 = 128-byte swizzle, the TMA's CU_TENSOR_MAP_SWIZZLE_128B pattern).
__device__ __forceinline__ unsigned long long wg_desc(unsigned addr, unsigned lbo, unsigned sbo) {
    return (unsigned long long)((addr >> 4) & 0x3FFF) | ((unsigned long long)((lbo >> 4) & 0x3FFF) << 16) |
           ((unsigned long long)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}
// The descriptor of a tile `bytes` past d's: the start address field plus bytes / 16. Shared addresses stay under
// 228 KiB (address / 16 < 2^14), so the field never carries: one 32-bit add on the low word, where a descriptor built
// anew (wg_desc) takes ~6 instructions. Build a stage's descriptor once and step through its k slices with this.
__device__ __forceinline__ unsigned long long desc_plus(unsigned long long d, unsigned bytes) {
    return (d & 0xFFFFFFFF00000000ull) | (unsigned)((unsigned)d + (bytes >> 4));
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>  // wait until at most N of this warpgroup's committed wgmma groups are still running
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
// Keeps the compiler from moving accumulator reads or writes across an asynchronous wgmma.
template <int R>
__device__ __forceinline__ void wg_fence_acc(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// d[64 x N] += A[64 x 16] (K-major, descriptor da) * B[16 x N] (descriptor db; TRANS_B 0: K-major, 1: N-major).
// Accumulator fragment (PTX ISA "wgmma register fragment D", m64nNk16): warp w of the warpgroup, lane l, register i:
// row 16w + l/4 + 8 ((i/2) % 2), col 8 (i/4) + 2 (l%4) + (i%2).
#define WG_REGS32 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define WG_REGS64 WG_REGS32 ", "                                                                          \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                  \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WG_REGS128 WG_REGS64 ", "                                                                        \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                  \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "                  \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "      \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define WG_D8(i) "+f"(d[(i) + 0]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), \
                 "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
#define WG_D32(i) WG_D8(i), WG_D8((i) + 8), WG_D8((i) + 16), WG_D8((i) + 24)
#define WG_D64 WG_D32(0), WG_D32(32)
#define WG_D128 WG_D64, WG_D32(64), WG_D32(96)
// NN: wgmma N; TY: PTX type; REGS / OPS: the N/2 accumulator operands; DA, DB, SC, TB: the operand numbers after them.
#define WGMMA_SPECIALISE(T, TY, NN, REGS, OPS, DA, DB, SC, TB)                                                      \
    template <int TRANS_B>                                                                                        \
    struct Wgmma<T, NN, TRANS_B> {                                                                                \
        static __device__ __forceinline__ void run(float (&d)[NN / 2], unsigned long long da,                    \
                                                   unsigned long long db, int scale_d) {                         \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SC ", 0;\n"                                          \
                         "wgmma.mma_async.sync.aligned.m64n" #NN "k16.f32." TY "." TY " {" REGS "}, " DA ", " DB \
                         ", p, 1, 1, 0, " TB ";\n}\n"                                                             \
                         : OPS                                                                                    \
                         : "l"(da), "l"(db), "r"(scale_d), "n"(TRANS_B));                                         \
        }                                                                                                         \
    };
template <typename T, int N, int TRANS_B> struct Wgmma;
WGMMA_SPECIALISE(__nv_bfloat16, "bf16", 256, WG_REGS128, WG_D128, "%128", "%129", "%130", "%131")
WGMMA_SPECIALISE(__half, "f16", 256, WG_REGS128, WG_D128, "%128", "%129", "%130", "%131")
WGMMA_SPECIALISE(__nv_bfloat16, "bf16", 128, WG_REGS64, WG_D64, "%64", "%65", "%66", "%67")
WGMMA_SPECIALISE(__half, "f16", 128, WG_REGS64, WG_D64, "%64", "%65", "%66", "%67")
WGMMA_SPECIALISE(__nv_bfloat16, "bf16", 64, WG_REGS32, WG_D32(0), "%32", "%33", "%34", "%35")
WGMMA_SPECIALISE(__half, "f16", 64, WG_REGS32, WG_D32(0), "%32", "%33", "%34", "%35")

// Register-A form (PTX: "wgmma.mma_async.sync.aligned.shape.dtype.bf16.bf16 d, a, b-desc, scale-d, imm-scale-a,
// imm-scale-b, imm-trans-b"): d[64 x N] += A[64 x 16] * B[16 x N], A from four .b32 registers a[0..3] of two 16-bit
// values each (low half first). A fragment (PTX ISA "Matrix Fragments for wgmma.mma_async.m64nNk16", figure
// wgmma-64N16-A), element e = 0..7 of warp w, lane l: row 16w + l/4 + 8 ((e/2) % 2), col 8 (e/4) + 2 (l%4) + (e%2)
// -- the accumulator layout restricted to 16 columns, so accumulator registers 8j .. 8j + 7 of an m64nN result,
// packed in pairs, are the A fragment of its columns 16j .. 16j + 15 (flash attention's P = softmax(S) -> P V).
#define WGMMA_RS_SPECIALISE(T, TY, NN, REGS, OPS, A0, DB, SC, TB)                                                   \
    template <int TRANS_B>                                                                                        \
    struct WgmmaRS<T, NN, TRANS_B> {                                                                              \
        static __device__ __forceinline__ void run(float (&d)[NN / 2], const unsigned (&a)[4],                  \
                                                   unsigned long long db, int scale_d) {                         \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " SC ", 0;\n"                                          \
                         "wgmma.mma_async.sync.aligned.m64n" #NN "k16.f32." TY "." TY " {" REGS "}, " A0 ", " DB \
                         ", p, 1, 1, " TB ";\n}\n"                                                                \
                         : OPS                                                                                    \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d), "n"(TRANS_B));     \
        }                                                                                                         \
    };
template <typename T, int N, int TRANS_B> struct WgmmaRS;
WGMMA_RS_SPECIALISE(__nv_bfloat16, "bf16", 128, WG_REGS64, WG_D64, "{%64, %65, %66, %67}", "%68", "%69", "%70")
WGMMA_RS_SPECIALISE(__half, "f16", 128, WG_REGS64, WG_D64, "{%64, %65, %66, %67}", "%68", "%69", "%70")
WGMMA_RS_SPECIALISE(__nv_bfloat16, "bf16", 64, WG_REGS32, WG_D32(0), "{%32, %33, %34, %35}", "%36", "%37", "%38")
WGMMA_RS_SPECIALISE(__half, "f16", 64, WG_REGS32, WG_D32(0), "{%32, %33, %34, %35}", "%36", "%37", "%38")
// The operand-list macros served only the specialisations above: a kernel may use these names itself.
#undef WG_REGS32
#undef WG_REGS64
#undef WG_REGS128
#undef WG_D8
#undef WG_D32
#undef WG_D64
#undef WG_D128
#undef WGMMA_SPECIALISE
#undef WGMMA_RS_SPECIALISE
#endif  // __CUDA_ARCH_FEAT_SM90_ALL
// ---- end of PRELUDE: line numbers restart at 1, so compiler errors count from the kernel's own text ----
#line 1
