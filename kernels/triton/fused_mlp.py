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
back to "pointer" otherwise. VARIANT "gluon" (sm_90 only; elsewhere it takes the "tma" rule) is
written in Gluon: a persistent, warp-specialised kernel (one TMA load warp, two consumer warpgroups)
that computes gate and up as ONE wgmma of twice GL_BLOCK_N's width a k step, so x is read from shared
memory once instead of twice, with the loads for a block's next tile running under this tile's
epilogue. Measured on the H200 at 4096x4096->11008 (benchmarks/variants_gpu.py, round gluon_mlp):
the default "gluon" 128x128 (GL_BLOCK_N 128), 4 stages (GL_STAGES): bf16 1,546-1,578 us = 1.09-1.11x
eager, fp16 1,614-1,622 us = 1.12-1.13x; "tma" 128x64, 3 stages (BLOCK_N / num_stages, the tile the
fallbacks keep): bf16 1,691-1,695 us (1.02x), fp16 1,702-1,787 us (1.02-1.07x); "gluon" without warp
specialisation (one wgmma issue stream a block and a block barrier before each refill) was slower than
"tma": 1,843 us at 128x128 bf16.
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

KERNEL_TYPE = "fused_mlp"
BACKEND = "triton"
CONFIG = {"VARIANT": "gluon", "BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "num_stages": 3,
          "num_warps": 8, "FP32_DOT": "tf32x3", "GL_BLOCK_N": 128, "GL_STAGES": 4}
SEARCH_SPACE = {
    "VARIANT": ["pointer", "tma", "gluon"],
    "BLOCK_M": [64, 128, 256],
    "BLOCK_N": [64, 128, 256],
    "BLOCK_K": [32, 64, 128],
    "GROUP_M": [1, 4, 8, 16],
    "num_stages": [2, 3, 4, 5],
    "num_warps": [4, 8],
    "FP32_DOT": ["tf32x3", "ieee"],
    "GL_BLOCK_N": [64, 128],
    "GL_STAGES": [2, 3, 4, 5],
}
# The Gluon kernel's tile width and ring depth are its own knobs: the tl kernels the "gluon" variant falls back to
# (fp32, non-sm_90) keep BLOCK_N / num_stages, where 128 wide x 4 stages is slower (fp32 tf32x3 at
# 4096x4096->11008 on the H200: 20,403-20,424 us against 15,319-15,447 us at 64 wide x 3 stages, round final9).
KNOB_SCOPE = {"GL_BLOCK_N": {"VARIANT": ["gluon"]}, "GL_STAGES": {"VARIANT": ["gluon"]},
              "FP32_DOT": {"dtype": ["fp32"]}}

# FP32_DOT is the tl.dot precision for fp32 inputs only; plain tf32 is not offered (see matmul.py:
# ~5e-4 relative input rounding shows as absolute error beyond the spec's atol near zero outputs).
# Shared memory a block may use when the device does not report it: 227 KB on H100/H200.
_DEFAULT_SMEM_BYTES = 232448
# setmaxnreg of each Gluon consumer warpgroup: its 64 x 256 fp32 accumulator takes 128 registers a thread; two at
# 232 and the load warp's group at 24 fit the SM's 64K (128 x (232 + 232 + 24) = 62,464).
_WS_CONSUMER_REGS = 232


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


@gluon.jit
def _gl_mlp_consumer(WG: gl.constexpr, a_smem, b_smem, h_smem, full, empty, h_desc, M, F, D, first_tile, n_tiles,
                     tile_step, GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    """One consumer warpgroup: rows WG * 64 .. + 64 of each h tile. Gate and up are ONE wgmma a k step: a stage's
    B tile is [2 * BLOCK_N, BLOCK_K], the w_gate rows of the tile's columns then the w_up rows, so the warpgroup
    issues one m64n(2 BLOCK_N)k16 wgmma where the tl kernels issue two of half the width (its x rows are read
    from shared memory once, not twice). Columns 0 .. BLOCK_N - 1 of the fp32 accumulator are gate, the rest
    up; a thread holds column c and c + BLOCK_N of its rows (wgmma's accumulator layout), so splitting them is
    register-local. One wgmma in flight; a stage is handed back through its `empty` mbarrier once this
    warpgroup's wgmma on it is done (one arrival a warpgroup). The h half leaves through shared memory by TMA
    while the next tile's loads and wgmma run: its buffer is waited for only before the next epilogue writes it.
    `ring` counts the k steps consumed (the stage and phase of the next) across the block's tiles."""
    HALF: gl.constexpr = h_smem.shape[1]
    BLOCK_M: gl.constexpr = 2 * HALF
    BLOCK_N: gl.constexpr = h_smem.shape[2]
    BLOCK_K: gl.constexpr = a_smem.shape[2]
    dtype: gl.constexpr = a_smem.dtype
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, 2 * BLOCK_N, 16])
    zero = gl.zeros([HALF, 2 * BLOCK_N], gl.float32, acc_layout)
    h_w = h_smem.index(WG)
    k_steps = gl.cdiv(D, BLOCK_K)
    ring = 0
    for tile in range(first_tile, n_tiles, tile_step):
        pid_m, pid_n = _grouped(tile, M, F, BLOCK_M, BLOCK_N, GROUP_M)
        mbarrier.wait(full.index(ring % STAGES), (ring // STAGES) & 1)
        acc = warpgroup_mma(a_smem.index(ring % STAGES).slice(WG * HALF, HALF),
                            b_smem.index(ring % STAGES).permute((1, 0)), zero, use_acc=False, is_async=True)
        acc = warpgroup_mma_wait(1, deps=[acc])  # the one group in flight may stay: only the loop's type is set
        for k in range(1, k_steps):
            stage = (ring + k) % STAGES
            mbarrier.wait(full.index(stage), ((ring + k) // STAGES) & 1)
            acc = warpgroup_mma(a_smem.index(stage).slice(WG * HALF, HALF), b_smem.index(stage).permute((1, 0)),
                                acc, is_async=True)
            acc = warpgroup_mma_wait(1, deps=[acc])  # step k - 1's wgmma is done: its stage may be refilled
            mbarrier.arrive(empty.index((ring + k - 1) % STAGES), count=1)
        acc = warpgroup_mma_wait(0, deps=[acc])
        mbarrier.arrive(empty.index((ring + k_steps - 1) % STAGES), count=1)
        ring += k_steps
        gate, up = gl.split(gl.permute(gl.reshape(acc, [HALF, 2, BLOCK_N]), (0, 2, 1)))
        # silu(g) = g * sigmoid(g); exp(-g) overflows to inf for g < -88 and g / inf = -0, the limit.
        h = gate / (1.0 + gl.exp(-gate)) * up
        tma.store_wait(0)  # the previous tile's h half has left h_w
        h_w.store(h.to(dtype))
        fence_async_shared()
        gl.thread_barrier()  # every thread's part of h is in shared memory before the one TMA store reads it
        tma.async_copy_shared_to_global(h_desc, [pid_m * BLOCK_M + WG * HALF, pid_n * BLOCK_N], h_w)
    tma.store_wait(0)


@gluon.jit
def _gl_mlp_loader(x_desc, g_desc, u_desc, a_smem, b_smem, full, empty, M, F, D, first_tile, n_tiles, tile_step,
                   GROUP_M: gl.constexpr, STAGES: gl.constexpr):
    """The load warp: each tile's x and weight slices into the STAGES-deep ring as fast as the consumers free the
    stages, running on into the next tile while the consumers finish this one."""
    BLOCK_M: gl.constexpr = a_smem.shape[1]
    BLOCK_K: gl.constexpr = a_smem.shape[2]
    BLOCK_N: gl.constexpr = g_desc.block_type.shape[0]
    k_steps = gl.cdiv(D, BLOCK_K)
    ring = 0
    for tile in range(first_tile, n_tiles, tile_step):
        pid_m, pid_n = _grouped(tile, M, F, BLOCK_M, BLOCK_N, GROUP_M)
        for k in range(k_steps):
            stage = (ring + k) % STAGES
            if ring + k >= STAGES:  # both warpgroups are done with the k step STAGES before this one
                mbarrier.wait(empty.index(stage), (((ring + k) // STAGES) - 1) & 1)
            _gl_load_stage(x_desc, g_desc, u_desc, a_smem, b_smem, full, stage, k * BLOCK_K, pid_m * BLOCK_M,
                           pid_n * BLOCK_N)
        ring += k_steps


@gluon.jit
def _gate_up_gluon(x_desc, g_desc, u_desc, h_desc, M, F, D, n_tiles, GROUP_M: gl.constexpr, STAGES: gl.constexpr,
                   CONSUMER_REGS: gl.constexpr):
    """sm_90, warp-specialised: one load warp and two consumer warpgroups of 64 rows each (the first is the
    kernel's own 4 warps, the second a worker partition) share each stage's B tile. A block takes tiles
    first_tile, first_tile + grid, ... in grouped order (persistent when the grid is smaller than the tiles);
    h_desc holds 64-row tiles."""
    dtype: gl.constexpr = x_desc.dtype
    BLOCK_M: gl.constexpr = x_desc.block_type.shape[0]
    BLOCK_K: gl.constexpr = x_desc.block_type.shape[1]
    BLOCK_N: gl.constexpr = g_desc.block_type.shape[0]
    first_tile = gl.program_id(0)
    tile_step = gl.num_programs(0)
    a_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, BLOCK_K], x_desc.layout)
    b_smem = gl.allocate_shared_memory(dtype, [STAGES, 2 * BLOCK_N, BLOCK_K], g_desc.layout)
    h_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M // 2, BLOCK_N], h_desc.layout)
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(full.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # one arrival from each consumer warpgroup
    gl.warp_specialize([
        (_gl_mlp_consumer, (0, a_smem, b_smem, h_smem, full, empty, h_desc, M, F, D, first_tile, n_tiles, tile_step,
                            GROUP_M, STAGES)),
        (_gl_mlp_consumer, (1, a_smem, b_smem, h_smem, full, empty, h_desc, M, F, D, first_tile, n_tiles, tile_step,
                            GROUP_M, STAGES)),
        (_gl_mlp_loader, (x_desc, g_desc, u_desc, a_smem, b_smem, full, empty, M, F, D, first_tile, n_tiles,
                          tile_step, GROUP_M, STAGES)),
    ], [4, 1], [CONSUMER_REGS, 24])


@gluon.jit
def _gl_load_stage(x_desc, g_desc, u_desc, a_smem, b_smem, ready, stage, k0, off_m, off_n):
    """The x slice and the gate / up weight slices of one k step into ring stage `stage`, signalled on ready."""
    BLOCK_N: gl.constexpr = g_desc.block_type.shape[0]
    bar = ready.index(stage)
    mbarrier.expect(bar, x_desc.block_type.nbytes + 2 * g_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(x_desc, [off_m, k0], bar, a_smem.index(stage))
    tma.async_copy_global_to_shared(g_desc, [off_n, k0], bar, b_smem.index(stage).slice(0, BLOCK_N))
    tma.async_copy_global_to_shared(u_desc, [off_n, k0], bar, b_smem.index(stage).slice(BLOCK_N, BLOCK_N))


def _tma_ok(t):
    """A tensor descriptor needs a contiguous last dim and 16-byte aligned base and row stride."""
    return (t.dim() == 2 and t.stride(1) == 1 and t.data_ptr() % 16 == 0
            and (t.stride(0) * t.element_size()) % 16 == 0 and min(t.shape) > 0)


# Read once a device: torch.cuda.get_device_properties costs 2.0 us a call on an H100 host, a hit here 0.09 us
# on the development CPU (timeit, h200.md seventeenth and eighteenth sessions); the launch path asks every call.
@functools.cache
def _sm_count(device):
    return torch.cuda.get_device_properties(device).multi_processor_count


@functools.cache
def _smem_bytes(device):
    if device.type != "cuda":
        return _DEFAULT_SMEM_BYTES
    return getattr(torch.cuda.get_device_properties(device), "shared_memory_per_block_optin", _DEFAULT_SMEM_BYTES)


_SMEM_LAYOUTS: dict = {}


def _smem_layout(rows, cols, gl_dtype):
    """The swizzled shared-memory layout of a [rows, cols] TMA tile, built once (~9 us of host time each)."""
    key = (rows, cols, str(gl_dtype))
    if key not in _SMEM_LAYOUTS:
        _SMEM_LAYOUTS[key] = gl.NVMMASharedLayout.get_default_for([rows, cols], gl_dtype)
    return _SMEM_LAYOUTS[key]


def _gluon_stage_count(cfg: dict, elem: int, smem: int) -> int:
    """Ring depth of VARIANT "gluon" for this CONFIG: GL_STAGES, or fewer where they do not fit next to the h
    tile; 0 where two do not (with one, the load warp would wait for a stage the consumers free only after the
    next k step's wgmma, which waits for that load: a hang) or the tile is not the kernel's (128 rows: two
    warpgroups of 64; GL_BLOCK_N 64 or 128: the wgmma is 2 x GL_BLOCK_N wide, at most 256)."""
    bm, bn, bk = cfg["BLOCK_M"], cfg["GL_BLOCK_N"], cfg["BLOCK_K"]
    if bm != 128 or bn not in (64, 128):
        return 0
    per_stage = (bm * bk + 2 * bn * bk) * elem
    room = smem - bm * bn * elem - 1024  # the h tile, barriers and alignment
    stages = min(cfg["GL_STAGES"], room // per_stage)
    return stages if stages >= 2 else 0


def _gluon_stages(x, descriptors_ok: bool, cfg):
    """_gluon_stage_count where the kernel can run, else 0: an sm_90 CUDA GPU (wgmma; ROCm's gfx9 also reports
    9.x) and 16-bit tensors a descriptor can address (descriptors_ok)."""
    if (not descriptors_ok or x.device.type != "cuda" or torch.version.hip is not None
            or torch.cuda.get_device_capability(x.device)[0] != 9):
        return 0
    return _gluon_stage_count(cfg, 2, _smem_bytes(x.device))


def _launch_gate_up(x, w_gate, w_up, h, cfg):
    M, D = x.shape
    F = w_gate.shape[0]
    bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
    if cfg["VARIANT"] not in SEARCH_SPACE["VARIANT"]:
        raise ValueError(f"fused_mlp CONFIG VARIANT must be one of {SEARCH_SPACE['VARIANT']}, got {cfg['VARIANT']!r}: "
                         "pick one of those")
    # tma and gluon: 16-bit inputs only (fp32 keeps tf32x3 on the pointer path).
    descriptors_ok = x.element_size() == 2 and all(_tma_ok(t) for t in (x, w_gate, w_up, h))
    if cfg["VARIANT"] == "gluon":
        stages = _gluon_stages(x, descriptors_ok, cfg)
        if stages:
            gbn = cfg["GL_BLOCK_N"]
            gl_dtype = gl.bfloat16 if x.dtype == torch.bfloat16 else gl.float16
            # h moves in 64-row halves, one a consumer warpgroup.
            descs = [GluonTensorDescriptor.from_tensor(t, block, _smem_layout(*block, gl_dtype))
                     for t, block in ((x, [bm, bk]), (w_gate, [gbn, bk]), (w_up, [gbn, bk]), (h, [bm // 2, gbn]))]
            n_tiles = triton.cdiv(M, bm) * triton.cdiv(F, gbn)
            # Persistent: one block an SM, so a block's loads for its next tile run under this tile's epilogue
            # (one block a tile took 1,637 us against 1,546-1,578 at 4096x4096->11008 bf16).
            blocks = min(n_tiles, _sm_count(x.device))
            _gate_up_gluon[(blocks,)](*descs, M, F, D, n_tiles, GROUP_M=cfg["GROUP_M"], STAGES=stages,
                                      CONSUMER_REGS=_WS_CONSUMER_REGS, num_warps=4)
            return
    # A pipeline stage holds an x slice and two weight slices; fp32 (tf32x3) keeps one more x
    # slice. Never ask for more than fits: halve BLOCK_K until one stage fits, then cut stages.
    smem, elem = _smem_bytes(x.device), x.element_size()
    if x.dtype == torch.float32:
        # Where h's rows are not a multiple of 16 elements Triton 3.6 stages the fp32 h tile for its store in shared
        # memory, bm x bn x 4 bytes: 256 x 256 needs 262,144 B against sm_90's 232,448 (its sm_90 compile:
        # tests/kernels/test_triton_sm90_smem.py). Narrow the wider side until the tile fits, for every call.
        while bm * bn * 4 > smem and max(bm, bn) > 16:
            bm, bn = (bm, bn // 2) if bn >= bm else (bm // 2, bn)
    # tma: the h tile is staged for its bulk store in the pipeline's dead buffers (sm_90 compiles measured:
    # 128x128x64 bf16 uses 147,512 B at 3 stages, 196,672 B at 4): it costs no stage.
    tma = cfg["VARIANT"] in ("tma", "gluon") and descriptors_ok
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
