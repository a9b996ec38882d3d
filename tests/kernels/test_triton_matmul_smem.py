"""Every fp32 tile the Triton matmul's SEARCH_SPACE offers launches within an sm_90 block's shared memory.

The CPU interpreter has no shared memory, so a tile too big for the GPU passes every CPU test and fails only there
(a GPU run asked for 256 x 256 fp32 and Triton refused it: 262,144 B against 232,448). Here the launch the
launcher makes on CPU (seen by a spy) is compiled ahead of time for sm_90 by Triton itself, no GPU needed, and the
bytes its compiler allots are compared with the H100 / H200 limit.

The compile sees the launch as the runtime would on a GPU with contiguous tensors whose rows are not a multiple of
16 elements (the spec's odd shapes): 16-byte aligned pointers, unit strides as constants (Triton specialises an
integer argument equal to 1), nothing known of the sizes and row strides. Then Triton cannot prove c's rows aligned
and moves the fp32 accumulator into the store's layout through shared memory, bm x bn x 4 bytes (with c's row
stride a multiple of 16 it does not: 256 x 256 at 131,072 B instead of 262,144). It runs in a subprocess without
TRITON_INTERPRET: under the interpreter @triton.jit (triton.language's own helpers too) makes functions only the
interpreter can run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from test_triton_starters import _inputs, _module, run_with_spies

SM90_SHARED_OPTIN = 232448  # bytes a block may opt in to on an H100 / H200 (227 KB)
SHAPE = {"M": 32, "K": 64, "N": 32}  # small: the interpreter runs the tile once; only the launch's meta matters
SEARCH_SPACE = _module("matmul").SEARCH_SPACE
F32_TILES = [(bm, bn) for bm in SEARCH_SPACE["F32_BLOCK_M"] for bn in SEARCH_SPACE["F32_BLOCK_N"]]
META = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EVEN_K", "PRECISION", "num_warps", "num_stages")

# Compiles _matmul_tiled for sm_90 once per meta read from stdin (a JSON list) and prints the shared bytes of each.
COMPILE_SM90 = r"""
import importlib.util, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

path, metas = json.load(sys.stdin)
spec = importlib.util.spec_from_file_location("matmul_sm90", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
kernel = module._matmul_tiled
names = list(kernel.arg_names)
pointers, unit = ("a_ptr", "b_ptr", "c_ptr"), ("s_ak", "s_bn", "s_cn")
shared = []
for meta in metas:
    options = {"num_warps": meta.pop("num_warps"), "num_stages": meta.pop("num_stages")}
    constants = {**meta, "UPCAST": False, **{name: 1 for name in unit}}  # UPCAST: the interpreter's bf16 workaround
    signature = {name: "constexpr" if name in constants else "*fp32" if name in pointers else "i32" for name in names}
    source = ASTSource(fn=kernel, signature=signature,
                       constexprs={(names.index(k),): v for k, v in constants.items()},
                       attrs={(names.index(k),): [["tt.divisibility", 16]] for k in pointers})
    shared.append(triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options).metadata.shared)
print(json.dumps(shared))
"""


def _launch_meta(config: dict) -> dict:
    """The meta of the one _matmul_tiled launch the launcher makes for an fp32 call under config."""
    inputs = _inputs("matmul", SHAPE, torch.float32, seed=3)
    launches = run_with_spies("matmul", config, ("_matmul_tiled",), [inputs], torch.float32)["_matmul_tiled"]
    assert len(launches) == 1, launches
    return {name: launches[0][name] for name in META}


def _sm90_shared_bytes(metas: list[dict]) -> list[int]:
    """Shared memory Triton allots the pointer kernel for each launch, compiled for sm_90 without a GPU."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", COMPILE_SM90], input=json.dumps([_module("matmul").__file__, metas]),
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_every_fp32_tile_fits_sm90_shared_memory() -> None:
    """The deepest point of each tile (the widest k step, the most stages): whatever the launcher makes of it fits."""
    deepest = {"F32_BLOCK_K": max(SEARCH_SPACE["F32_BLOCK_K"]), "F32_STAGES": max(SEARCH_SPACE["F32_STAGES"])}
    metas = [_launch_meta({"VARIANT": "tiled", "F32_BLOCK_M": bm, "F32_BLOCK_N": bn, **deepest})
             for bm, bn in F32_TILES]
    shared = _sm90_shared_bytes(metas)
    over = [(tile, meta, used) for tile, meta, used in zip(F32_TILES, metas, shared, strict=True)
            if used > SM90_SHARED_OPTIN]
    assert not over, over
    assert max(shared) > SM90_SHARED_OPTIN // 2, shared  # the deep points do use the room: the compile is real


@pytest.mark.slow
def test_the_widest_fp32_tile_is_narrowed_to_fit() -> None:
    """256 x 256 fp32 (a 256 KB store staging) launches as 256 x 128, which fits, whichever dot and warps; the
    tile as asked is what Triton refuses."""
    points = [("tf32x3", 8), ("ieee", 8), ("tf32x3", 4)]
    metas = [_launch_meta({"VARIANT": "tiled", "F32_BLOCK_M": 256, "F32_BLOCK_N": 256, "F32_BLOCK_K": 32,
                           "F32_STAGES": 2, "FP32_DOT": precision, "num_warps": warps}) for precision, warps in points]
    assert {(meta["BLOCK_M"], meta["BLOCK_N"]) for meta in metas} == {(256, 128)}
    *narrowed, as_asked = _sm90_shared_bytes([*metas, {**metas[0], "BLOCK_N": 256}])
    assert all(used <= SM90_SHARED_OPTIN for used in narrowed), dict(zip(points, narrowed, strict=True))
    assert as_asked > SM90_SHARED_OPTIN, as_asked
