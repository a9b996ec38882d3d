"""Every tile a Triton GEMM starter's SEARCH_SPACE offers launches within an sm_90 block's shared memory.

The CPU interpreter has no shared memory, so a tile too big for the GPU passed every CPU test and failed only there:
a GPU run asked the matmul for 256 x 256 in fp32 and Triton refused it (262,144 B against 232,448). Here the
launch each launcher makes on CPU is compiled for sm_90 by Triton itself (tests/kernels/sm90_compile.py, no GPU)
at the deepest point of each tile (the widest k step, the most stages asked: the launcher cuts them to what it
thinks fits) and the bytes Triton allots are compared with the H100 / H200 limit.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from sm90_compile import SM90_SHARED_OPTIN, capture, compile_sm90
from starter_run import make_inputs, starter_module


@dataclass(frozen=True)
class TileKnobs:
    """Where a starter's pointer-kernel tile lives in its CONFIG, for one dtype."""

    kernel_type: str
    kernel: str  # the pointer kernel the launcher runs at this dtype
    dtype: torch.dtype
    variant: str  # the VARIANT that reaches that kernel
    rows: str  # knob names: tile rows, tile columns, k step, stages
    cols: str
    depth: str
    stages: str
    shape: dict  # small (the interpreter runs it once) with rows that are not 16-aligned: the fp32 store's case

    def tiles(self) -> list[tuple[int, int]]:
        space = starter_module(self.kernel_type).SEARCH_SPACE
        return [(r, c) for r in space[self.rows] for c in space[self.cols]]

    def config(self, rows: int, cols: int, **more: object) -> dict:
        space = starter_module(self.kernel_type).SEARCH_SPACE
        return {"VARIANT": self.variant, self.rows: rows, self.cols: cols, self.depth: max(space[self.depth]),
                self.stages: max(space[self.stages]), **more}

    def launch(self, config: dict):
        inputs = make_inputs(self.kernel_type, self.shape, self.dtype, seed=3)
        (launch,) = capture(self.kernel_type, config, (self.kernel,), [inputs], self.dtype)
        return launch


GEMMS = [
    TileKnobs("matmul", "_matmul_tiled", torch.float32, "tiled", "F32_BLOCK_M", "F32_BLOCK_N", "F32_BLOCK_K",
              "F32_STAGES", {"M": 32, "K": 64, "N": 30}),
    TileKnobs("matmul", "_matmul_tiled", torch.bfloat16, "tiled", "BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages",
              {"M": 32, "K": 64, "N": 30}),
    TileKnobs("fused_mlp", "_gate_up_kernel", torch.float32, "pointer", "BLOCK_M", "BLOCK_N", "BLOCK_K",
              "num_stages", {"M": 7, "D": 48, "F": 40}),
    # Not the fused MLP in bf16: its nine deepest points fit (49-196 KB) but spill up to 7.6 KB a thread, and ptxas
    # took 235 s to compile them with a cold Triton cache on 2 cores (the matmul's: 15 s); it serves only the
    # odd widths a descriptor cannot address.
]
IDS = [f"{g.kernel_type}-{str(g.dtype).removeprefix('torch.')}" for g in GEMMS]
FP32_GEMMS = [g for g in GEMMS if g.dtype == torch.float32]


@pytest.mark.slow
@pytest.mark.parametrize("gemm", GEMMS, ids=IDS)
def test_every_tile_fits_sm90_shared_memory(gemm: TileKnobs) -> None:
    tiles = gemm.tiles()
    launches = [gemm.launch(gemm.config(rows, cols)) for rows, cols in tiles]
    costs = compile_sm90(gemm.kernel_type, launches)
    over = [(tile, launch.meta, cost.shared) for tile, launch, cost in zip(tiles, launches, costs, strict=True)
            if cost.shared > SM90_SHARED_OPTIN]
    assert not over, over
    # The deep points use the room (the compile is real, not a stand-in that answers 0).
    assert max(cost.shared for cost in costs) > SM90_SHARED_OPTIN // 2, costs


@pytest.mark.slow
@pytest.mark.parametrize("gemm", FP32_GEMMS, ids=[i for i, g in zip(IDS, GEMMS, strict=True) if g in FP32_GEMMS])
def test_the_widest_fp32_tile_is_narrowed_to_fit(gemm: TileKnobs) -> None:
    """256 x 256 fp32 launches as 256 x 128, which fits; the tile as asked is what Triton refuses (its fp32 output
    staged for the store: 262,144 B)."""
    launch = gemm.launch(gemm.config(256, 256))
    assert (launch.meta["BLOCK_M"], launch.meta["BLOCK_N"]) == (256, 128)
    narrowed, as_asked = compile_sm90(gemm.kernel_type, [launch, launch.with_meta(BLOCK_N=256)])
    assert narrowed.shared <= SM90_SHARED_OPTIN < as_asked.shared, (narrowed, as_asked)
