"""Shared memory, registers and spills of the Triton matmul's fp32 tiles on sm_90, compiled on a machine without a GPU.

Runs the starter under the CPU interpreter to capture the launch its launcher makes for each point, then compiles
that launch for sm_90 with Triton's own compiler (tests/kernels/sm90_compile.py; registers and stack read from the
cubin with Triton's bundled cuobjdump). A measurement of the compile, not of speed: spills alone do not rank tiles
(the default spills and measured fastest on the H100, docs/benchmarks/h200.md).

    TRITON_INTERPRET=1 python3 benchmarks/sm90_costs.py --out OUT
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "kernels"))  # sm90_compile: the capture / compile helpers the tests use
os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported: the capture runs interpreted

import torch  # noqa: E402
from sm90_compile import SM90_SHARED_OPTIN, capture, compile_sm90  # noqa: E402

from autokernel_ci.specs import get_spec  # noqa: E402

# (BLOCK_M, BLOCK_N, BLOCK_K, stages, warps): the default, its neighbours and the tiles of the fp32 variant rounds.
POINTS = [(256, 64, 32, 3, 8), (256, 64, 16, 3, 8), (256, 64, 16, 4, 8), (256, 64, 32, 2, 8), (256, 64, 32, 3, 4),
          (128, 64, 32, 3, 8), (128, 64, 64, 3, 8), (128, 128, 32, 3, 8), (64, 64, 64, 4, 8)]
SHAPE = {"M": 32, "K": 64, "N": 30}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    out = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    inputs = get_spec("matmul").make_inputs(SHAPE, torch.float32, "cpu", torch.Generator().manual_seed(1))
    (base,) = capture("matmul", {"VARIANT": "tiled"}, ("_matmul_tiled",), [inputs], torch.float32)
    launches = [base.with_meta(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_stages=st, num_warps=w)
                for bm, bn, bk, st, w in POINTS]
    rows = [{"tile": f"{bm}x{bn}x{bk}", "stages": st, "warps": w, "shared_bytes": cost.shared,
             "registers": cost.registers, "stack_bytes": cost.stack, "fits": cost.shared <= SM90_SHARED_OPTIN}
            for (bm, bn, bk, st, w), cost in zip(POINTS, compile_sm90("matmul", launches), strict=True)]
    (out / "sm90_costs.json").write_text(json.dumps({"kernel": "matmul _matmul_tiled fp32 (tf32x3)",
                                                     "target": "sm_90", "rows": rows}, indent=1))
    lines = ["| tile | stages | warps | shared B | registers | stack B (spills) |", "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['tile']} | {r['stages']} | {r['warps']} | {r['shared_bytes']:,} | {r['registers']} | "
              f"{r['stack_bytes']} |" for r in rows]
    (out / "sm90_costs.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
