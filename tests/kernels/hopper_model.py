"""Models of Hopper's shared-memory data movement that the CUDA wgmma kernels rely on (matmul and flash
attention tests share them): the 64-bit wgmma matrix descriptor, TMA's 128-byte swizzle, a 2-d bulk tensor
copy into shared memory and the [rows x 16] operand one wgmma k16 step reads through a descriptor
(canonical layouts as the PTX ISA's "Shared Memory Matrix Layout" section states them)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path

import numpy as np

from autokernel_ci import nvrtc


def wg_desc(addr: int, lbo: int, sbo: int) -> int:  # the kernel's wg_desc
    return ((addr >> 4) & 0x3FFF) | (((lbo >> 4) & 0x3FFF) << 16) | (((sbo >> 4) & 0x3FFF) << 32) | (1 << 62)


def desc_plus(d: int, nbytes: int) -> int:  # the kernels' desc_plus: the start address field advanced by nbytes
    return (d & 0xFFFFFFFF00000000) | ((d + (nbytes >> 4)) & 0xFFFFFFFF)


def swizzle128(addr):
    return addr ^ (((addr >> 7) & 7) << 4)


def tma_load(smem, dst, tensor, c0, c1, box_cols, box_rows):
    """Model of cp.async.bulk.tensor.2d (128B swizzle): box at (c0 innermost, c1) of `tensor` -> smem bytes dst.."""
    assert dst % 1024 == 0 and box_cols * 2 <= 128
    i, j = np.meshgrid(np.arange(box_rows), np.arange(box_cols), indexing="ij")
    r, c = c1 + i, c0 + j
    inside = (r < tensor.shape[0]) & (c < tensor.shape[1])
    values = np.where(inside, tensor[np.minimum(r, tensor.shape[0] - 1), np.minimum(c, tensor.shape[1] - 1)], 0.0)
    smem[swizzle128(dst + 128 * i + 2 * j) // 2] = values


def tma_store(smem, src, tensor, c0, c1, box_cols, box_rows):
    """Model of cp.async.bulk.tensor.2d global <- shared (128B swizzle): smem bytes src.. -> the box at (c0
    innermost, c1) of `tensor`; elements past the tensor's bounds are dropped, as the TMA does."""
    assert src % 1024 == 0 and box_cols * 2 <= 128
    i, j = np.meshgrid(np.arange(box_rows), np.arange(box_cols), indexing="ij")
    r, c = c1 + i, c0 + j
    inside = (r < tensor.shape[0]) & (c < tensor.shape[1])
    tensor[r[inside], c[inside]] = smem[swizzle128(src + 128 * i + 2 * j)[inside] // 2]


def wgmma_operand(smem, desc: int, rows: int, mn_major: bool) -> np.ndarray:
    """The [rows x 16] operand (rows = M or N, 16 = K) wgmma reads through `desc` (canonical layouts above)."""
    assert desc >> 62 == 1, "128-byte swizzle mode"
    start, lbo, sbo = (desc & 0x3FFF) << 4, ((desc >> 16) & 0x3FFF) << 4, ((desc >> 32) & 0x3FFF) << 4
    mn, kk = np.meshgrid(np.arange(rows), np.arange(16), indexing="ij")
    if mn_major:
        offset = 2 * (mn % 64) + lbo * (mn // 64) + 128 * (kk % 8) + sbo * (kk // 8)
    else:
        offset = 128 * (mn % 8) + sbo * (mn // 8) + 2 * kk
    return smem[swizzle128(start + offset) // 2]


def cuobjdump() -> str | None:
    """cuobjdump from the CUDA toolkit on PATH, else the copy Triton's NVIDIA backend ships; None if neither."""
    for cand in (shutil.which("cuobjdump"), *(str(Path(p) / "triton/backends/nvidia/bin/cuobjdump") for p in sys.path
                                               if p)):
        if cand and Path(cand).is_file():
            return cand
    return None


def hopper_build(module, **overrides) -> tuple:
    """The module's sm_90a build (the last of cuda_builds()) under CONFIG overrides; CONFIG is restored."""
    original = dict(module.CONFIG)
    try:
        module.CONFIG.update(overrides)
        return module.cuda_builds()[-1]
    finally:
        module.CONFIG.clear()
        module.CONFIG.update(original)


def load_starter(kernel_type: str, backend: str, module_name: str):
    """A starter kernel file imported under its own module name (the tests patch its CONFIG and launchers)."""
    from autokernel_ci.paths import starter_kernel

    spec = importlib.util.spec_from_file_location(module_name, starter_kernel(kernel_type, backend))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The warp-specialised kernels hand registers between warpgroups: the producer drops to 40 (setmaxnreg.dec),
# the two consumers rise to 232 (setmaxnreg.inc), which only succeeds if the block was launched with at least
# 128 * 40 + 256 * 232 = 64,512 registers, i.e. 168 a thread at 384 threads. With fewer, .inc waits forever.
SETMAXNREG_POOL = 128 * 40 + 256 * 232


def assert_registers_cover_setmaxnreg(ptxas_log: str, kernel: str, threads: int = 384) -> None:
    lines = ptxas_log.splitlines()
    at = next(i for i, line in enumerate(lines) if f"Function properties for {kernel}" in line)
    used = next(int(m.group(1)) for line in lines[at:] if (m := re.search(r"Used (\d+) registers", line)))
    assert used * threads >= SETMAXNREG_POOL, (f"{kernel}: {used} registers x {threads} threads < {SETMAXNREG_POOL}: "
                                               "setmaxnreg.inc 232 would never be granted")


class FakeTensorMap:
    """What a kernel's tensor map reads, for CPU tests that replace nvrtc.tensor_map: t's own rows (bounds = t's
    shape) in float64, after nvrtc's real TMA rules (alignment, unit-stride rows, box vs swizzle)."""

    def __init__(self, t, box, swizzle=128, l2_promotion=256):
        nvrtc.tensor_map_layout(t, box, swizzle, l2_promotion)
        self.l2_promotion = l2_promotion
        self.rows = t.double().numpy()
        self.box, self.swizzle = tuple(box), swizzle
