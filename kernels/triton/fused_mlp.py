"""SwiGLU MLP, Triton: one GEMM kernel computes x@w_gate^T and x@w_up^T together with the SiLU*mul epilogue.

Each program owns a BLOCK_M x BLOCK_N tile of h = silu(x @ w_gate^T) * (x @ w_up^T): it loads
the x slice once per K step and multiplies it by the matching w_gate and w_up slices into two fp32
accumulators, then applies SiLU*mul in registers and writes h once in x.dtype. The gate and up
activations (2 x M x F) never reach memory; unfused, they cost a write and a read each (4 x
4096 x 11008 x 2 B = 361 MB for LLaMA-7B, ~85 us on an H200). The down projection h @ w_down^T
stays on torch.matmul (cuBLAS), as the spec allows. Launch order is grouped (GROUP_M).

VARIANT "tma" reads the x and weight tiles through tensor descriptors (Hopper's bulk tensor copy,
which took the matmul starter from 0.91x to 1.13x cuBLAS on the H200 at 4096x4096x11008) and
stores h the same way; it needs 16-bit inputs, 16-byte aligned bases and row strides, and falls
back to "pointer" otherwise. Default: "tma" with 128x64 tiles (two 128x64 fp32 accumulators per
program): 1,634-1,684 us at 4096x4096->11008 bf16 on the H200, 1.03-1.05x eager, where "pointer"
128x128 took 1,834-1,908 us (benchmarks/variants_gpu.py, two rounds).
"""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

KERNEL_TYPE = "fused_mlp"
BACKEND = "triton"
CONFIG = {"VARIANT": "tma", "BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "num_stages": 3,
          "num_warps": 8, "FP32_DOT": "tf32x3"}
SEARCH_SPACE = {
    "VARIANT": ["pointer", "tma"],
    "BLOCK_M": [64, 128, 256],
    "BLOCK_N": [64, 128, 256],
    "BLOCK_K": [32, 64, 128],
    "GROUP_M": [1, 4, 8, 16],
    "num_stages": [2, 3, 4, 5],
    "num_warps": [4, 8],
    "FP32_DOT": ["tf32x3", "ieee"],
}

# FP32_DOT is the tl.dot precision for fp32 inputs only; plain tf32 is not offered (see matmul.py:
# ~5e-4 relative input rounding shows as absolute error beyond the spec's atol near zero outputs).
# Shared memory a block may use when the device does not report it: 227 KB on H100/H200.
_DEFAULT_SMEM_BYTES = 232448


@triton.jit
def _grouped(pid, M, F, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(F, BLOCK_N)
    per_group = GROUP_M * grid_n
    first_m = (pid // per_group) * GROUP_M
    group_m = tl.minimum(grid_m - first_m, GROUP_M)
    return first_m + (pid % per_group) % group_m, (pid % per_group) // group_m


@triton.jit
def _gate_up_kernel(x_ptr, wg_ptr, wu_ptr, h_ptr, M, F, D,
                    s_xm, s_xd, s_gf, s_gd, s_uf, s_ud, s_hm, s_hf,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                    EVEN_K: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    pid_m, pid_n = _grouped(tl.program_id(0), M, F, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < F
    x_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * s_xm + offs_k[None, :] * s_xd
    # w[F, D] read as its transpose: element (k, n) of the [BLOCK_K, BLOCK_N] slice is w[n, k].
    g_ptrs = wg_ptr + offs_k[:, None] * s_gd + offs_n[None, :].to(tl.int64) * s_gf
    u_ptrs = wu_ptr + offs_k[:, None] * s_ud + offs_n[None, :].to(tl.int64) * s_uf
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(D, BLOCK_K)):
        if EVEN_K:
            x = tl.load(x_ptrs, mask=mask_m[:, None], other=0.0)
            g = tl.load(g_ptrs, mask=mask_n[None, :], other=0.0)
            u = tl.load(u_ptrs, mask=mask_n[None, :], other=0.0)
        else:
            k_left = D - k * BLOCK_K
            x = tl.load(x_ptrs, mask=mask_m[:, None] & (offs_k[None, :] < k_left), other=0.0)
            g = tl.load(g_ptrs, mask=(offs_k[:, None] < k_left) & mask_n[None, :], other=0.0)
            u = tl.load(u_ptrs, mask=(offs_k[:, None] < k_left) & mask_n[None, :], other=0.0)
        if UPCAST:  # Triton 3.6's CPU interpreter multiplies bf16 tiles as raw integers
            x = x.to(tl.float32)
            g = g.to(tl.float32)
            u = u.to(tl.float32)
        acc_g = tl.dot(x, g, acc_g, input_precision=PRECISION)
        acc_u = tl.dot(x, u, acc_u, input_precision=PRECISION)
        x_ptrs += BLOCK_K * s_xd
        g_ptrs += BLOCK_K * s_gd
        u_ptrs += BLOCK_K * s_ud
    # silu(g) = g * sigmoid(g); exp(-g) overflows to inf for g < -88 and g / inf = -0, the limit.
    h = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u
    h_ptrs = h_ptr + offs_m[:, None].to(tl.int64) * s_hm + offs_n[None, :] * s_hf
    tl.store(h_ptrs, h.to(h_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _gate_up_tma(x_desc, g_desc, u_desc, h_desc, M, F, D, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, UPCAST: tl.constexpr):
    pid_m, pid_n = _grouped(tl.program_id(0), M, F, BLOCK_M, BLOCK_N, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(D, BLOCK_K)):
        x = x_desc.load([off_m, k * BLOCK_K])
        g = g_desc.load([off_n, k * BLOCK_K]).T  # w[F, D] tiles come as [BLOCK_N, BLOCK_K]
        u = u_desc.load([off_n, k * BLOCK_K]).T
        if UPCAST:
            x = x.to(tl.float32)
            g = g.to(tl.float32)
            u = u.to(tl.float32)
        acc_g = tl.dot(x, g, acc_g)
        acc_u = tl.dot(x, u, acc_u)
    h = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u
    h_desc.store([off_m, off_n], h.to(h_desc.dtype))


def _tma_ok(t):
    """A tensor descriptor needs a contiguous last dim and 16-byte aligned base and row stride."""
    return (t.dim() == 2 and t.stride(1) == 1 and t.data_ptr() % 16 == 0
            and (t.stride(0) * t.element_size()) % 16 == 0 and min(t.shape) > 0)


def _smem_bytes(device):
    if device.type != "cuda":
        return _DEFAULT_SMEM_BYTES
    return getattr(torch.cuda.get_device_properties(device), "shared_memory_per_block_optin", _DEFAULT_SMEM_BYTES)


def _launch_gate_up(x, w_gate, w_up, h, cfg):
    M, D = x.shape
    F = w_gate.shape[0]
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    # A pipeline stage holds an x slice and two weight slices; fp32 (tf32x3) keeps one more x
    # slice. Never ask for more than fits: halve BLOCK_K until one stage fits, then cut stages.
    smem, elem = _smem_bytes(x.device), x.element_size()
    # tma: 16-bit inputs only (fp32 keeps tf32x3 on the pointer path). The h tile is staged for its
    # bulk store in the pipeline's dead buffers (sm_90 compiles measured: 128x128x64 bf16 uses
    # 147,512 B at 3 stages, 196,672 B at 4): it costs no stage.
    tma = cfg["VARIANT"] == "tma" and elem == 2 and all(_tma_ok(t) for t in (x, w_gate, w_up, h))
    while True:
        per_stage = (bm * bk + 2 * bk * bn) * elem
        extra = bm * bk * elem if x.dtype == torch.float32 else 0
        if per_stage + extra <= smem or bk <= 16:
            break
        bk //= 2
    stages = max(1, min(cfg["num_stages"], (smem - extra) // per_stage))
    grid = (triton.cdiv(M, bm) * triton.cdiv(F, bn),)
    upcast = x.device.type == "cpu" and x.dtype == torch.bfloat16
    if tma:
        _gate_up_tma[grid](
            TensorDescriptor.from_tensor(x, [bm, bk]), TensorDescriptor.from_tensor(w_gate, [bn, bk]),
            TensorDescriptor.from_tensor(w_up, [bn, bk]), TensorDescriptor.from_tensor(h, [bm, bn]), M, F, D,
            BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg["GROUP_M"], UPCAST=upcast,
            num_stages=stages, num_warps=cfg["num_warps"])
        return
    _gate_up_kernel[grid](
        x, w_gate, w_up, h, M, F, D, *x.stride(), *w_gate.stride(), *w_up.stride(), *h.stride(),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg["GROUP_M"], EVEN_K=D % bk == 0,
        UPCAST=upcast,
        PRECISION=cfg["FP32_DOT"] if x.dtype == torch.float32 else "tf32",  # tf32: the default
        num_stages=stages, num_warps=cfg["num_warps"],
    )


def kernel_fn(x, w_gate, w_up, w_down):
    M, D = x.shape
    F = w_gate.shape[0]
    if w_gate.shape != (F, D) or w_up.shape != (F, D) or w_down.shape != (D, F):
        raise ValueError(f"fused_mlp expects w_gate/w_up [F,D] and w_down [D,F] for x [M,D]={tuple(x.shape)}, got "
                         f"{tuple(w_gate.shape)}, {tuple(w_up.shape)}, {tuple(w_down.shape)}")
    h = torch.empty((M, F), dtype=x.dtype, device=x.device)
    if h.numel():
        _launch_gate_up(x, w_gate, w_up, h, CONFIG)
    return torch.matmul(h, w_down.t())
