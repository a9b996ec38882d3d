"""SwiGLU MLP, CUDA C++ (NVRTC) + cuBLAS: the three GEMMs through torch.matmul, SiLU(gate)*up fused in one kernel.

gate = x @ w_gate^T and up = x @ w_up^T come from torch.matmul (cuBLAS, allowed for this type);
one vectorised kernel computes silu(gate) * up in fp32 and writes h in the input dtype (one read
of gate and up, one write of h instead of eager's three elementwise passes); h @ w_down^T is the
last GEMM.
"""

import torch

from autokernel_ci import nvrtc

KERNEL_TYPE = "fused_mlp"
BACKEND = "cuda"
CONFIG = {"THREADS": 256, "VEC_BYTES": 16, "BLOCKS_PER_SM": 8}
SEARCH_SPACE = {"THREADS": [128, 256, 512, 1024], "VEC_BYTES": [4, 8, 16], "BLOCKS_PER_SM": [4, 8, 16, 32]}

# nvrtc.PRELUDE (autokernel_ci/prelude.cuh) comes first: <cuda_fp16.h>, <cuda_bf16.h>, INFINITY, to_float(x),
# from_float<T>(f), Vec<T, N> (one aligned 4/8/16-byte access), warp_sum(v), group_sum<WPR>(v, red).
# Compiler error lines count from the r""" line below (the prelude ends with #line 1).
CUDA_SOURCE = nvrtc.PRELUDE + r"""
template <typename T, int VEC>
__device__ __forceinline__ void silu_mul(T* __restrict__ h, const T* __restrict__ gate, const T* __restrict__ up,
                                         long long n) {
    using V = Vec<T, VEC>;
    const long long nvec = n / VEC;  // the host picks VEC so that VEC divides n
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < nvec;
         i += (long long)gridDim.x * blockDim.x) {
        const V g = reinterpret_cast<const V*>(gate)[i];
        const V u = reinterpret_cast<const V*>(up)[i];
        V o;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const float a = to_float(g.v[k]);
            o.v[k] = from_float<T>(a / (1.f + expf(-a)) * to_float(u.v[k]));
        }
        reinterpret_cast<V*>(h)[i] = o;
    }
}

#define VEC_OF(T) ((int)(VEC_BYTES / sizeof(T)) > 0 ? (int)(VEC_BYTES / sizeof(T)) : 1)
#define SILU_KERNEL(NAME, T, VEC)                                                                         \
    extern "C" __global__ void __launch_bounds__(THREADS) silu_mul_##NAME(                                \
        T* __restrict__ h, const T* __restrict__ gate, const T* __restrict__ up, long long n) {           \
        silu_mul<T, VEC>(h, gate, up, n);                                                                 \
    }
#define SILU_DTYPE(SUFFIX, T)              \
    SILU_KERNEL(SUFFIX##_v, T, VEC_OF(T))  \
    SILU_KERNEL(SUFFIX##_s, T, 1)

SILU_DTYPE(f32, float)
SILU_DTYPE(f16, __half)
SILU_DTYPE(bf16, __nv_bfloat16)
"""

_SUFFIX = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def _defines():
    return {"THREADS": CONFIG["THREADS"], "VEC_BYTES": CONFIG["VEC_BYTES"]}


def cuda_builds():
    """(source, defines, kernel names) of every build kernel_fn may request (the tests compile each)."""
    return [(CUDA_SOURCE, _defines(), [f"silu_mul_{s}_{v}" for s in _SUFFIX.values() for v in "sv"])]


def kernel_fn(x, w_gate, w_up, w_down):
    gate = torch.matmul(x, w_gate.t()).contiguous()
    up = torch.matmul(x, w_up.t()).contiguous()
    h = torch.empty_like(gate)
    n = h.numel()
    if n:
        vec_bytes = CONFIG["VEC_BYTES"]
        vec = max(vec_bytes // h.element_size(), 1)
        aligned = n % vec == 0 and all(t.data_ptr() % vec_bytes == 0 for t in (gate, up, h))
        work = n // vec if aligned else n
        threads = CONFIG["THREADS"]
        sms = nvrtc.sm_count(x.device)
        grid = max(1, min(-(-work // threads), sms * CONFIG["BLOCKS_PER_SM"]))
        name = f"silu_mul_{_SUFFIX[h.dtype]}_{'v' if aligned else 's'}"
        kernel = nvrtc.compile_kernel(CUDA_SOURCE, name, defines=_defines(), source_name="fused_mlp.cu")
        nvrtc.launch(kernel, grid=(grid,), block=(threads,), args=(h, gate, up, nvrtc.i64(n)))
    return torch.matmul(h, w_down.t())
