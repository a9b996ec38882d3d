"""Matmul a[M,K] @ b[K,N], Triton: tiled tensor-core GEMM with grouped launch order, or a persistent variant.

Each program computes a BLOCK_M x BLOCK_N tile of c with an fp32 accumulator, stepping through K
in BLOCK_K slices that the compiler software-pipelines num_stages deep. GROUP_M tiles along M are
launched next to each other so the b panel they share stays in L2 (grouped order). "persistent"
launches one program per SM that walks the tiles in the same grouped order (no tail wave, launch
cost paid once). a and b may have any strides (b is often an nn.Linear weight's .T); tiles at the
M/N/K edges are masked, so any shape works, including 1 x 1 x 1.

"tma" and "tma_persistent" read the tiles through tensor descriptors (Hopper's bulk tensor copy:
one instruction per tile instead of per-thread addresses, edges zero-filled by the hardware). They
need 16-byte aligned bases and row strides and a contiguous last dimension (of b, or of b.T for an
nn.Linear weight) and 16-bit inputs; otherwise they fall back to the pointer variants.

"gluon" (sm_90 only; elsewhere, and for fp32, it takes the "tma" rule) is written in Gluon: a persistent,
warp-specialised kernel (one TMA load warp, two consumer warpgroups of 64 rows) that issues one
m64n(GL_BLOCK_N)k16 wgmma a k step with one in flight, frees each ring stage as soon as both warpgroups' wgmma
on it are done, and stores c through shared memory with the bulk-store wait deferred to the buffer's reuse, so
a block's next tile loads and multiplies under this tile's store. It is the default, 128x256x64 (GL_BLOCK_N
256), 3 stages (GL_STAGES; the 64 KB c tile leaves room for 3 of 48 KB). Measured on the H200 in bf16
(benchmarks/variants_gpu.py, rounds matmul_gluon and matmul_gluon2, 4 points each against "tma" alternating):
4096x4096x11008 493-536 us = 1.05-1.14x cuBLAS ("tma" 529-552 us, 1.02-1.06x), 4096x11008x4096 513-525 us =
0.99-1.01x ("tma" 522-533 us, 0.97-1.00x). 128 wide was 0.92x at K=11008 (one wgmma of half the width reads
1.2x the shared-memory bytes a MAC); 32-wide k steps with 4-6 stages of 24 KB, 0.97-1.05x, did not help.
"tma" with 128x256x64 tiles, 3 stages and GROUP_M 16 was the default before (two earlier rounds: 490-491 us
at 4096x4096x11008, 1.10-1.15x; 503-530 us at 4096x11008x4096, 0.98-0.99x).
"""

import functools

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonTensorDescriptor
from triton.tools.tensor_descriptor import TensorDescriptor

KERNEL_TYPE = "matmul"
BACKEND = "triton"
CONFIG = {"VARIANT": "gluon", "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 16,
          "num_stages": 3, "num_warps": 8, "FP32_DOT": "tf32x3", "FLATTEN": False, "TMA_STORE": True,
          "GL_BLOCK_N": 256, "GL_STAGES": 3, "F32_BLOCK_M": 256, "F32_BLOCK_N": 64,
          "F32_BLOCK_K": 32, "F32_STAGES": 3}
SEARCH_SPACE = {
    "VARIANT": ["tiled", "persistent", "tma", "tma_persistent", "gluon"],
    "BLOCK_M": [64, 128, 256],
    "BLOCK_N": [64, 128, 256],
    "BLOCK_K": [32, 64, 128],
    "GROUP_M": [1, 4, 8, 16],
    "num_stages": [2, 3, 4, 5],
    "num_warps": [4, 8],
    "FP32_DOT": ["tf32x3", "ieee"],
    "FLATTEN": [False, True],  # tma_persistent: one software-pipelined loop over tiles x K slices
    "TMA_STORE": [True, False],  # tma*: c through a descriptor (staged in smem) or plain masked stores
    "GL_BLOCK_N": [128, 256],  # gluon: the tile width (one m64n(GL_BLOCK_N)k16 wgmma a warpgroup and k step)
    "GL_STAGES": [2, 3, 4, 5],  # gluon: the TMA ring's depth (cut to what fits next to the c tile)
    # fp32 inputs: the pointer kernel's tile and stages in place of BLOCK_M / BLOCK_N / BLOCK_K / num_stages
    # (tf32x3 splits each slice into two more in registers, so the 16-bit tile is not its best)
    "F32_BLOCK_M": [64, 128, 256],
    "F32_BLOCK_N": [64, 128, 256],
    # 16: 256x64 at 3 stages compiles for sm_90 in 242 registers, no spill (32: 296 B), yet ran 18-22% slower at
    # both LLaMA-7B shapes on an H100 (gpu24a); kept in the space since that covers two shapes only
    "F32_BLOCK_K": [16, 32, 64],
    "F32_STAGES": [2, 3, 4],
}
# The Gluon kernel's tile is its own pair of knobs: "gluon" falls back to "tma" (fp32, not sm_90, rows a descriptor
# cannot address), which keeps BLOCK_N / num_stages.
KNOB_SCOPE = {"GL_BLOCK_N": {"VARIANT": ["gluon"]}, "GL_STAGES": {"VARIANT": ["gluon"]},
              "FP32_DOT": {"dtype": ["fp32"]}, "F32_BLOCK_M": {"dtype": ["fp32"]}, "F32_BLOCK_N": {"dtype": ["fp32"]},
              "F32_BLOCK_K": {"dtype": ["fp32"]}, "F32_STAGES": {"dtype": ["fp32"]}}
# The fp32 tile, 256x64x32 at 3 stages: 6,245-6,366 us a call at both LLaMA-7B shapes on an H100 (1.10-1.13x
# cuBLAS's fp32, 59 TFLOP/s), against 12,304-12,785 us (0.55-0.57x) on the 16-bit path's 128x256x64 with the two
# stages that fit; 64x64x64 at 4 stages 1.00-1.03x, 128-wide tiles 0.62-0.74x (variants_gpu.py, 2026-12-07).

# FP32_DOT is the tl.dot precision for fp32 inputs only (bf16/fp16 always use their tensor cores).
# Plain tf32 is not offered: it rounds inputs to 10 mantissa bits; on the spec's large_magnitude
# case (outputs of std ~900) that fails 100 of 5120 elements, up to 1.15 off, against atol 0.01
# (tf32 rounding emulated on CPU, 64x96x80). tf32x3 (three tf32 MMAs) keeps fp32 accuracy at
# ~1/3 of tf32 speed; ieee is plain fp32 FMA.
# Shared memory a block may use when the device does not report it: 227 KB on H100/H200.
_DEFAULT_SMEM_BYTES = 232448
_CPU_PROGRAMS = 4  # "persistent" grid size under the CPU interpreter (no SMs to count)
# setmaxnreg of each Gluon consumer warpgroup: its 64 x 256 fp32 accumulator takes 128 registers a thread; two at
# 232 and the load warp's group at 24 fit the SM's 64K (128 x (232 + 232 + 24) = 62,464).
_WS_CONSUMER_REGS = 232


@triton.jit
def _tile(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn, pid_m, pid_n,
          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
          UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * s_am + offs_k[None, :] * s_ak
    b_ptrs = b_ptr + offs_k[:, None] * s_bk + offs_n[None, :].to(tl.int64) * s_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs, mask=mask_m[:, None], other=0.0)
            b = tl.load(b_ptrs, mask=mask_n[None, :], other=0.0)
        else:
            k_left = K - k * BLOCK_K
            a = tl.load(a_ptrs, mask=mask_m[:, None] & (offs_k[None, :] < k_left), other=0.0)
            b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & mask_n[None, :], other=0.0)
        if UPCAST:  # Triton 3.6's CPU interpreter multiplies bf16 tiles as raw integers
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * s_ak
        b_ptrs += BLOCK_K * s_bk
    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * s_cm + offs_n[None, :] * s_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _grouped(tile_id, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * grid_n
    first_m = (tile_id // per_group) * GROUP_M
    group_m = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (tile_id % per_group) % group_m
    pid_n = (tile_id % per_group) // group_m
    return pid_m, pid_n


@triton.jit
def _matmul_tiled(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                  EVEN_K: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    pid_m, pid_n = _grouped(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    _tile(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn, pid_m, pid_n,
          BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, UPCAST, PRECISION)


@triton.jit
def _matmul_persistent(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn, n_programs,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                       EVEN_K: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr):
    n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile_id in range(tl.program_id(0), n_tiles, n_programs):
        pid_m, pid_n = _grouped(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        _tile(a_ptr, b_ptr, c_ptr, M, N, K, s_am, s_ak, s_bk, s_bn, s_cm, s_cn, pid_m, pid_n,
              BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, UPCAST, PRECISION)


@triton.jit
def _tma_tile(a_desc, b_desc, c_desc, c_ptr, s_cm, s_cn, M, N, K, pid_m, pid_n, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, B_NK: tl.constexpr, UPCAST: tl.constexpr,
              PRECISION: tl.constexpr, TMA_STORE: tl.constexpr):
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([off_m, k * BLOCK_K])
        if B_NK:  # b.T is the contiguous tensor (an nn.Linear weight): tiles come as [BLOCK_N, BLOCK_K]
            b = b_desc.load([off_n, k * BLOCK_K]).T
        else:
            b = b_desc.load([k * BLOCK_K, off_n])
        if UPCAST:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    if TMA_STORE:
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))
    else:
        offs_m = off_m + tl.arange(0, BLOCK_M)
        offs_n = off_n + tl.arange(0, BLOCK_N)
        c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * s_cm + offs_n[None, :] * s_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def _matmul_tma(a_desc, b_desc, c_desc, c_ptr, s_cm, s_cn, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, B_NK: tl.constexpr, UPCAST: tl.constexpr,
                PRECISION: tl.constexpr, TMA_STORE: tl.constexpr):
    pid_m, pid_n = _grouped(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    _tma_tile(a_desc, b_desc, c_desc, c_ptr, s_cm, s_cn, M, N, K, pid_m, pid_n, BLOCK_M, BLOCK_N, BLOCK_K, B_NK,
              UPCAST, PRECISION, TMA_STORE)


@triton.jit
def _matmul_tma_persistent(a_desc, b_desc, c_desc, c_ptr, s_cm, s_cn, M, N, K, n_programs, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                           B_NK: tl.constexpr, UPCAST: tl.constexpr, PRECISION: tl.constexpr,
                           FLATTEN: tl.constexpr, TMA_STORE: tl.constexpr):
    n_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile_id in tl.range(tl.program_id(0), n_tiles, n_programs, flatten=FLATTEN):
        pid_m, pid_n = _grouped(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        _tma_tile(a_desc, b_desc, c_desc, c_ptr, s_cm, s_cn, M, N, K, pid_m, pid_n, BLOCK_M, BLOCK_N, BLOCK_K,
                  B_NK, UPCAST, PRECISION, TMA_STORE)


@gluon.jit
def _gl_mm_consumer(WG: gl.constexpr, a_smem, b_smem, c_smem, full, empty, c_desc, M, N, K, first_tile, n_tiles,
                    tile_step, B_NK: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    """One consumer warpgroup: rows WG * 64 .. + 64 of each c tile, one m64n(BLOCK_N)k16 wgmma a k step with one
    in flight; a stage goes back to the load warp through its `empty` mbarrier (one arrival a warpgroup) once
    this warpgroup's wgmma on it is done. The c half leaves through shared memory by TMA while the next tile's
    wgmma run; its buffer is waited for only before the next epilogue writes it. `ring` counts the k steps
    consumed across the block's tiles (the stage and phase of the next)."""
    HALF: gl.constexpr = c_smem.shape[1]
    BLOCK_M: gl.constexpr = 2 * HALF
    BLOCK_N: gl.constexpr = c_smem.shape[2]
    BLOCK_K: gl.constexpr = a_smem.shape[2]
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, BLOCK_N, 16])
    zero = gl.zeros([HALF, BLOCK_N], gl.float32, acc_layout)
    c_w = c_smem.index(WG)
    k_steps = gl.cdiv(K, BLOCK_K)
    ring = 0
    for tile in range(first_tile, n_tiles, tile_step):
        pid_m, pid_n = _grouped(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        stage = ring % STAGES
        mbarrier.wait(full.index(stage), (ring // STAGES) & 1)
        acc = warpgroup_mma(a_smem.index(stage).slice(WG * HALF, HALF), _gl_b_operand(b_smem, stage, B_NK), zero,
                            use_acc=False, is_async=True)
        acc = warpgroup_mma_wait(1, deps=[acc])  # the one group in flight may stay: only the loop's type is set
        for k in range(1, k_steps):
            stage = (ring + k) % STAGES
            mbarrier.wait(full.index(stage), ((ring + k) // STAGES) & 1)
            acc = warpgroup_mma(a_smem.index(stage).slice(WG * HALF, HALF), _gl_b_operand(b_smem, stage, B_NK),
                                acc, is_async=True)
            acc = warpgroup_mma_wait(1, deps=[acc])  # step k - 1's wgmma is done: its stage may be refilled
            mbarrier.arrive(empty.index((ring + k - 1) % STAGES), count=1)
        acc = warpgroup_mma_wait(0, deps=[acc])
        mbarrier.arrive(empty.index((ring + k_steps - 1) % STAGES), count=1)
        ring += k_steps
        tma.store_wait(0)  # the previous tile's c half has left c_w
        c_w.store(acc.to(c_smem.dtype))
        fence_async_shared()
        gl.thread_barrier()  # every thread's part of c is in shared memory before the one TMA store reads it
        tma.async_copy_shared_to_global(c_desc, [pid_m * BLOCK_M + WG * HALF, pid_n * BLOCK_N], c_w)
    tma.store_wait(0)


@gluon.jit
def _gl_b_operand(b_smem, stage, B_NK: gl.constexpr):
    """Stage `stage` of the b ring as wgmma's [BLOCK_K, BLOCK_N] operand: b.T's [BLOCK_N, BLOCK_K] tiles (an
    nn.Linear weight) are read K-major through a transposed view, b's own [BLOCK_K, BLOCK_N] tiles N-major."""
    if B_NK:
        return b_smem.index(stage).permute((1, 0))
    else:
        return b_smem.index(stage)


@gluon.jit
def _gl_mm_loader(a_desc, b_desc, a_smem, b_smem, full, empty, M, N, K, first_tile, n_tiles, tile_step,
                  B_NK: gl.constexpr, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    """The load warp: each tile's a and b slices into the STAGES-deep ring as fast as the consumers free the
    stages, running on into the next tile while the consumers finish this one."""
    BLOCK_M: gl.constexpr = a_smem.shape[1]
    BLOCK_K: gl.constexpr = a_smem.shape[2]
    BLOCK_N: gl.constexpr = b_desc.block_type.shape[0] if B_NK else b_desc.block_type.shape[1]
    k_steps = gl.cdiv(K, BLOCK_K)
    ring = 0
    for tile in range(first_tile, n_tiles, tile_step):
        pid_m, pid_n = _grouped(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        for k in range(k_steps):
            stage = (ring + k) % STAGES
            if ring + k >= STAGES:  # both warpgroups are done with the k step STAGES before this one
                mbarrier.wait(empty.index(stage), (((ring + k) // STAGES) - 1) & 1)
            bar = full.index(stage)
            mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(a_desc, [pid_m * BLOCK_M, k * BLOCK_K], bar, a_smem.index(stage))
            if B_NK:
                tma.async_copy_global_to_shared(b_desc, [pid_n * BLOCK_N, k * BLOCK_K], bar, b_smem.index(stage))
            else:
                tma.async_copy_global_to_shared(b_desc, [k * BLOCK_K, pid_n * BLOCK_N], bar, b_smem.index(stage))
        ring += k_steps


@gluon.jit
def _matmul_gluon(a_desc, b_desc, c_desc, M, N, K, n_tiles, B_NK: gl.constexpr, GROUP_M: gl.constexpr,
                  STAGES: gl.constexpr, CONSUMER_REGS: gl.constexpr):
    """sm_90, persistent and warp-specialised: one load warp and two consumer warpgroups of 64 rows each (the
    first is the kernel's own 4 warps, the second a worker partition) share each stage's b tile. A block takes
    tiles first_tile, first_tile + grid, ... in grouped order; c_desc holds 64-row tiles."""
    dtype: gl.constexpr = a_desc.dtype
    BLOCK_M: gl.constexpr = a_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = a_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = c_desc.block_type.shape[1]
    first_tile = gl.program_id(0)
    tile_step = gl.num_programs(0)
    a_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_smem = gl.allocate_shared_memory(dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    c_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M // 2, BLOCK_N], c_desc.layout)
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(full.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # one arrival from each consumer warpgroup
    gl.warp_specialize([
        (_gl_mm_consumer, (0, a_smem, b_smem, c_smem, full, empty, c_desc, M, N, K, first_tile, n_tiles, tile_step,
                           B_NK, GROUP_M, STAGES)),
        (_gl_mm_consumer, (1, a_smem, b_smem, c_smem, full, empty, c_desc, M, N, K, first_tile, n_tiles, tile_step,
                           B_NK, GROUP_M, STAGES)),
        (_gl_mm_loader, (a_desc, b_desc, a_smem, b_smem, full, empty, M, N, K, first_tile, n_tiles, tile_step,
                         B_NK, GROUP_M, STAGES)),
    ], [4, 1], [CONSUMER_REGS, 24])


# Read once a device: torch.cuda.get_device_properties costs 2.0 us a call on an H100 host, a hit here 0.09 us
# on the development CPU (timeit, h200.md seventeenth and eighteenth sessions); the launch path asks every call.
@functools.cache
def _device_facts(device):
    """(SM count, shared memory bytes per block) of the device; interpreter stand-ins on CPU."""
    if device.type != "cuda":
        return _CPU_PROGRAMS, _DEFAULT_SMEM_BYTES
    props = torch.cuda.get_device_properties(device)
    return props.multi_processor_count, getattr(props, "shared_memory_per_block_optin", _DEFAULT_SMEM_BYTES)


def _tma_ok(t):
    """A tensor descriptor needs a contiguous last dim and 16-byte aligned base and row stride."""
    return (t.dim() == 2 and t.stride(1) == 1 and t.data_ptr() % 16 == 0
            and (t.stride(0) * t.element_size()) % 16 == 0 and min(t.shape) > 0)


def _b_nk(a, b, c):
    """How the descriptor kernels read b: False for b's own [K, N] rows, True for b.T's [N, K] rows (b is a
    transposed nn.Linear weight); None where a, c or both forms of b cannot be read through a descriptor."""
    if not (_tma_ok(a) and _tma_ok(c)):
        return None
    if _tma_ok(b):
        return False
    return True if _tma_ok(b.T) else None


def _descriptors(a, b, c, bm, bn, bk, b_nk):
    """(a, b, c) tensor descriptors, b's over b.T when b_nk."""
    b_desc = TensorDescriptor.from_tensor(b.T, [bn, bk]) if b_nk else TensorDescriptor.from_tensor(b, [bk, bn])
    return TensorDescriptor.from_tensor(a, [bm, bk]), b_desc, TensorDescriptor.from_tensor(c, [bm, bn])


_SMEM_LAYOUTS: dict = {}


def _smem_layout(block: list[int], gl_dtype):
    """The swizzled shared-memory layout of a TMA tile, built once: ~9.6 us of host time each (CPU measurement),
    three a call, which made a GPT-2 size GEMM (65 us) host-bound."""
    key = (*block, str(gl_dtype))
    if key not in _SMEM_LAYOUTS:
        _SMEM_LAYOUTS[key] = gl.NVMMASharedLayout.get_default_for(block, gl_dtype)
    return _SMEM_LAYOUTS[key]


def _gluon_stage_count(cfg: dict, elem: int, smem: int) -> int:
    """Ring depth of VARIANT "gluon" for this CONFIG: GL_STAGES, or fewer where they do not fit next to the c
    tile; 0 where two do not (with one, the load warp would wait for a stage the consumers free only after the
    next k step's wgmma, which waits for that load: a hang) or the tile is not the kernel's (128 rows: two
    warpgroups of 64; GL_BLOCK_N 64-256: wgmma's widths)."""
    bm, bn, bk = cfg["BLOCK_M"], cfg["GL_BLOCK_N"], cfg["BLOCK_K"]
    if bm != 128 or bn not in (64, 128, 256):
        return 0
    per_stage = (bm * bk + bk * bn) * elem
    room = smem - bm * bn * elem - 1024  # the c tile, barriers and alignment
    stages = min(cfg["GL_STAGES"], room // per_stage)
    return stages if stages >= 2 else 0


def _gluon_launch(a, b, c, cfg, n_sms, smem, b_nk) -> bool:
    """VARIANT "gluon" where it can run (an sm_90 CUDA GPU: wgmma; ROCm's gfx9 also reports 9.x; 16-bit tensors
    a descriptor can address: b_nk not None), launched and True; else False (the caller takes the "tma" rule)."""
    if (b_nk is None or a.element_size() != 2 or a.device.type != "cuda" or torch.version.hip is not None
            or torch.cuda.get_device_capability(a.device)[0] != 9):
        return False
    stages = _gluon_stage_count(cfg, 2, smem)
    if not stages:
        return False
    M, K = a.shape
    N = b.shape[1]
    bm, bn, bk = cfg["BLOCK_M"], cfg["GL_BLOCK_N"], cfg["BLOCK_K"]
    gl_dtype = gl.bfloat16 if a.dtype == torch.bfloat16 else gl.float16
    # c moves in 64-row halves, one a consumer warpgroup.
    operands = ((a, [bm, bk]), (b.T, [bn, bk]) if b_nk else (b, [bk, bn]), (c, [bm // 2, bn]))
    descs = [GluonTensorDescriptor.from_tensor(t, block, _smem_layout(block, gl_dtype)) for t, block in operands]
    n_tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    _matmul_gluon[(min(n_tiles, n_sms),)](*descs, M, N, K, n_tiles, B_NK=b_nk, GROUP_M=cfg["GROUP_M"],
                                          STAGES=stages, CONSUMER_REGS=_WS_CONSUMER_REGS, num_warps=4)
    return True


def _pipeline(cfg, dtype, elem, smem):
    """(BLOCK_K, stages) that fit in smem bytes of shared memory a block; never more than asked."""
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    # Each pipeline stage holds one a and one b slice; fp32 (tf32x3) keeps one more a slice
    # (sm_90 compiles measured: 128x256x64 fp32 uses 2 x 96 KB + 32 KB). Halve BLOCK_K until one
    # stage fits, then cut the stages (a 256x256x128 bf16 stage is 128 KB: 5 would fail to launch).
    # The c tile of a bulk store (TMA_STORE) is staged in shared memory. "tma" stages it in the
    # pipeline's buffers, dead by then: no cost (128x256x64 bf16: 147,480 B at 3 stages, 196,640 at
    # 4). "tma_persistent" keeps the pipeline running into the next tile, so the c tile is extra
    # (213,016 B at 3 stages, 262,176 at 4: too much), and FLATTEN without TMA_STORE adds half a
    # tile of layout scratch (180,248 B at 3 stages) -- all sm_90 compiles with Triton 3.6.
    extra = 0
    if cfg["VARIANT"] == "tma_persistent" and elem == 2:
        extra = bm * bn * elem if cfg["TMA_STORE"] else (bm * bn * elem // 2 if cfg["FLATTEN"] else 0)
    while True:
        per_stage = (bm * bk + bk * bn) * elem
        extra_a = bm * bk * elem if dtype == torch.float32 else 0
        if per_stage + extra + extra_a <= smem or bk <= 16:
            break
        bk //= 2
    return bk, max(1, min(cfg["num_stages"], (smem - extra - extra_a) // per_stage))


def _f32_store_fit(bm, bn, smem):
    """(BLOCK_M, BLOCK_N) of an fp32 call whose store fits shared memory. Where c's rows are not a multiple of 16
    elements, Triton 3.6 moves the fp32 accumulator into the store's layout through shared memory, bm x bn x 4
    bytes (the pipeline's buffers are dead by then, so not on top of them): 256 x 256 needs 262,144 B, over the
    232,448 an sm_90 block may use (compiled ahead of time for sm_90: tests/kernels/test_triton_sm90_smem.py).
    Halve the wider side until it fits, for every call: the rule stays right whatever a later Triton proves
    about a stride. 16-bit calls store without it (256 x 256 bf16: 65,536 B, the operands only)."""
    while bm * bn * 4 > smem and max(bm, bn) > 16:
        if bn >= bm:
            bn //= 2
        else:
            bm //= 2
    return bm, bn


def _launch(a, b, c, cfg):
    variant = cfg["VARIANT"]
    if variant not in SEARCH_SPACE["VARIANT"]:
        raise ValueError(f"matmul CONFIG VARIANT must be one of {SEARCH_SPACE['VARIANT']}, got {variant!r}: "
                         "pick one of those")
    M, K = a.shape
    N = b.shape[1]
    n_sms, smem = _device_facts(a.device)
    # fp32 keeps the pointer path: its tf32x3 a-copy plus a 128x256 fp32 c tile (128 KB) leave room for one
    # pipeline stage, and only the 16-bit tensor-core path was measured on the H200.
    b_nk = _b_nk(a, b, c) if variant in ("gluon", "tma", "tma_persistent") and a.element_size() == 2 else None
    if variant == "gluon":
        if _gluon_launch(a, b, c, cfg, n_sms, smem, b_nk):
            return
        variant = "tma"
    if a.dtype == torch.float32:
        bm, bn = _f32_store_fit(cfg["F32_BLOCK_M"], cfg["F32_BLOCK_N"], smem)
        cfg = {**cfg, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": cfg["F32_BLOCK_K"], "num_stages": cfg["F32_STAGES"]}
    bm, bn = cfg["BLOCK_M"], cfg["BLOCK_N"]
    bk, stages = _pipeline(cfg, a.dtype, a.element_size(), smem)
    args = (a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride())
    meta = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg["GROUP_M"], EVEN_K=K % bk == 0,
                UPCAST=a.device.type == "cpu" and a.dtype == torch.bfloat16,
                PRECISION=cfg["FP32_DOT"] if a.dtype == torch.float32 else "tf32",  # tf32: the default
                num_stages=stages, num_warps=cfg["num_warps"])
    n_tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    if variant.startswith("tma"):
        if b_nk is not None:
            descs = _descriptors(a, b, c, bm, bn, bk, b_nk)
            tma_meta = {k: v for k, v in meta.items() if k != "EVEN_K"}
            c_args = (c, *c.stride(), M, N, K)
            if variant == "tma_persistent":
                programs = min(n_sms, n_tiles)
                _matmul_tma_persistent[(programs,)](*descs, *c_args, programs, B_NK=b_nk, FLATTEN=cfg["FLATTEN"],
                                                    TMA_STORE=cfg["TMA_STORE"], **tma_meta)
            else:
                _matmul_tma[(n_tiles,)](*descs, *c_args, B_NK=b_nk, TMA_STORE=cfg["TMA_STORE"], **tma_meta)
            return
        variant = "persistent" if variant == "tma_persistent" else "tiled"
    if variant == "persistent":
        programs = min(n_sms, n_tiles)
        _matmul_persistent[(programs,)](*args, programs, **meta)
    else:
        _matmul_tiled[(n_tiles,)](*args, **meta)


def kernel_fn(a, b):
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul expects a[M,K] and b[K,N], got {tuple(a.shape)} and {tuple(b.shape)}")
    c = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
    if c.numel():
        if a.shape[1] == 0:
            c.zero_()
        else:
            _launch(a, b, c, CONFIG)
    return c
