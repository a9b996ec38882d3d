"""Host time of one call of a starter kernel, by CONFIG point, and where it goes (GPU; not a test).

At the GPT-2 sizes some Triton descriptor ("tma") kernels are host-bound: the attention at D = 64 replays
from a CUDA graph in 49 us but takes 157 us a call through Python, the matmul 73 us against 117-163 us
(docs/benchmarks/h200.md). This script times CALLS back-to-back calls of each point at a tiny shape (the GPU
work is a few microseconds, so the wall time a call is the host's) after a warm-up that compiles, and
profiles CALLS more with cProfile: the functions with the most own time show what the launch path spends
its time on.

    python benchmarks/launch_overhead.py --out OUT
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_starters_gpu import _import  # noqa: E402

from autokernel_ci import kernelfile  # noqa: E402
from autokernel_ci.paths import starter_kernel  # noqa: E402
from autokernel_ci.specs import get_spec  # noqa: E402

# (kernel type, shape, CONFIG overrides): tiny problems whose GPU time is far below the launch path's.
POINTS: list[tuple[str, dict, dict]] = [
    ("matmul", {"M": 256, "K": 256, "N": 256}, {"VARIANT": "gluon"}),
    ("matmul", {"M": 256, "K": 256, "N": 256}, {"VARIANT": "tma"}),
    ("matmul", {"M": 256, "K": 256, "N": 256}, {"VARIANT": "tiled"}),
    ("fused_mlp", {"M": 256, "D": 256, "F": 512}, {"VARIANT": "gluon"}),
    ("fused_mlp", {"M": 256, "D": 256, "F": 512}, {"VARIANT": "tma"}),
    ("fused_mlp", {"M": 256, "D": 256, "F": 512}, {"VARIANT": "pointer"}),
    ("flash_attention", {"B": 1, "H": 2, "Hkv": 2, "S": 256, "D": 64, "causal": True}, {"VARIANT": "tma"}),
    ("flash_attention", {"B": 1, "H": 2, "Hkv": 2, "S": 256, "D": 64, "causal": True}, {"VARIANT": "pointer"}),
]
CALLS = 300
TOP = 12


@dataclass
class LaunchCost:
    kernel_type: str
    shape: dict
    config: dict
    host_us: float = 0.0  # wall time a call, back-to-back, synchronised once at the end
    top: list[str] = field(default_factory=list)  # cProfile's functions with the most own time
    error: str = ""


def _measure(kernel_type: str, shape: dict, overrides: dict, workdir: Path) -> LaunchCost:
    row = LaunchCost(kernel_type, shape, overrides)
    try:
        kf = kernelfile.load(starter_kernel(kernel_type, "triton"))
        source = kf.with_config({**kf.config, **overrides}).source
        path = workdir / f"{kernel_type}_{kernelfile.source_hash(source)}.py"
        path.write_text(source)
        module = _import(path)
        spec = get_spec(kernel_type)
        gen = torch.Generator(device="cuda").manual_seed(0)
        inputs = spec.make_inputs(dict(shape), torch.bfloat16, "cuda", gen)
        for _ in range(5):  # compile, then warm the launch caches
            module.kernel_fn(*inputs)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(CALLS):
            module.kernel_fn(*inputs)
        torch.cuda.synchronize()
        row.host_us = round((time.perf_counter() - t0) / CALLS * 1e6, 1)
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(CALLS):
            module.kernel_fn(*inputs)
        profile.disable()
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(TOP)
        row.top = [line.strip() for line in text.getvalue().splitlines() if line.strip()[:1].isdigit()][:TOP]
    except Exception as exc:  # a point that fails: recorded, the others still run
        row.error = f"{type(exc).__name__}: {str(exc)[:300]}"
    return row


def render(rows: list[LaunchCost]) -> str:
    lines = [f"{'type':16} {'config':28} {'host us/call':>12}"]
    for r in rows:
        lines.append(f"{r.kernel_type:16} {json.dumps(r.config):28} {r.host_us:12.1f} {r.error}")
    for r in rows:
        lines += ["", f"{r.kernel_type} {json.dumps(r.config)}: ncalls tottime percall cumtime percall function"]
        lines += [f"  {t}" for t in r.top]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("launch_overhead.py needs a CUDA GPU", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out / "points"
    work.mkdir(exist_ok=True)
    rows = [_measure(kt, shape, cfg, work) for kt, shape, cfg in POINTS]
    (args.out / "launch_overhead.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))
    print(render(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
