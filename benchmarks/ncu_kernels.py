"""Run one kernel type's starters (and eager) once each inside a profiler range, for Nsight Compute (GPU; not a test)

ncu sees only the launches between cudaProfilerStart and cudaProfilerStop (run it with
--profile-from-start off), so warm-up, autotuning, NVRTC builds and input generation stay out of
the report. Each implementation runs WARMUP times first, then once inside the range.

    ncu --profile-from-start off --section SpeedOfLight --section WarpStateStats ... \
        python benchmarks/ncu_kernels.py matmul --backends triton,cuda [--index 1] [--dtype bf16]
        [--config '{"WG_CLUSTER": 2}']   # also the starter of the last backend with these CONFIG overrides
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

from autokernel_ci import kernelfile
from autokernel_ci.harness import baselines, loader
from autokernel_ci.harness.stages import dtype_from_name
from autokernel_ci.paths import starter_kernel
from autokernel_ci.specs import get_spec

WARMUP = 3


def add_target_args(ap: argparse.ArgumentParser) -> None:
    """The kernel type, backends, shape and dtype a profiling script runs (shared with sustained_clock.py)."""
    ap.add_argument("kernel_type")
    ap.add_argument("--backends", default="triton,cuda")
    ap.add_argument("--shape-set", default="llama7b")
    ap.add_argument("--index", type=int, default=0, help="which shape of the set")
    ap.add_argument("--dtype", default="bf16")


def target_inputs(args: argparse.Namespace, device: torch.device):
    """(spec, shape, inputs) of add_target_args' choice, from a fixed seed."""
    spec = get_spec(args.kernel_type)
    shape = dict(spec.shape_sets[args.shape_set][args.index])
    gen = torch.Generator(device=device).manual_seed(0)
    return spec, shape, spec.make_inputs(shape, dtype_from_name(args.dtype), device, gen)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_target_args(ap)
    ap.add_argument("--no-eager", action="store_true")
    ap.add_argument("--config", type=json.loads, default=None,
                    help="CONFIG overrides (JSON) for one more run of the last backend's starter")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("ncu_kernels.py needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    spec, shape, inputs = target_inputs(args, device)
    calls = {} if args.no_eager else {"eager": lambda: baselines.eager(spec)(*inputs)}
    paths = {backend: starter_kernel(args.kernel_type, backend) for backend in args.backends.split(",")}
    workdir = Path(tempfile.mkdtemp(prefix="ncu_kernels_"))
    if args.config:  # the search agent's way: the starter rewritten with another CONFIG
        last = list(paths)[-1]
        kf = kernelfile.load(paths[last])
        variant = workdir / f"{args.kernel_type}_{last}_variant.py"
        variant.write_text(kf.with_config({**kf.config, **args.config}).source)
        paths[f"{last} {json.dumps(args.config)}"] = variant
    for label, path in paths.items():
        cand = loader.load_candidate(path, device=str(device))
        if isinstance(cand, loader.LoadFailure):
            print(f"{label}: {path} did not load: {cand}", file=sys.stderr)
            return 1
        calls[label] = lambda c=cand: c.fn(*inputs)
    for fn in calls.values():
        for _ in range(WARMUP):
            fn()
    torch.cuda.synchronize(device)
    print(f"{args.kernel_type} {spec.describe_shape(shape)} {args.dtype}: profiling {', '.join(calls)} in this order")
    torch.cuda.cudart().cudaProfilerStart()
    for fn in calls.values():
        fn()
    torch.cuda.synchronize(device)
    torch.cuda.cudart().cudaProfilerStop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
