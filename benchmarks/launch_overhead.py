"""Host time of one call of a starter kernel, by CONFIG point, and where it goes (GPU; not a test).

At the GPT-2 sizes some Triton descriptor ("tma") kernels are host-bound: the attention at D = 64 replays
from a CUDA graph in 49 us but takes 157 us a call through Python, the matmul 73 us against 117-163 us
(docs/benchmarks/h200.md). This script times CALLS back-to-back calls of each point at a tiny shape (the GPU
work is a few microseconds, so the wall time a call is the host's) after a warm-up that compiles, and
profiles CALLS more with cProfile: the functions with the most own time show what the launch path spends
its time on.

`--backend cuda` does the same for the nine CUDA starters at their `cpu` shapes (a few microseconds of GPU
work), next to eager at the same shape, and splits one launch of the CUDA reduce into its steps: the build
lookup, `nvrtc.launch`, cuda.core's `launch` with a prebuilt config, and the driver's `cuLaunchKernel` (the
floor a Python launch can reach).

    python benchmarks/launch_overhead.py --out OUT [--backend cuda]
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
from autokernel_ci.specs import KERNEL_TYPES, get_spec  # noqa: E402

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
# The CUDA starters: every type at its first `cpu` shape, CONFIG as committed.
CUDA_SET = "cpu"
CALLS = 300
TOP = 12


@dataclass
class LaunchCost:
    kernel_type: str
    shape: dict
    config: dict
    host_us: float = 0.0  # wall time a call, back-to-back, synchronised once at the end
    eager_us: float = 0.0  # the same for the spec's eager baseline (CUDA backend only)
    top: list[str] = field(default_factory=list)  # cProfile's functions with the most own time
    error: str = ""


def _per_call_us(fn, *args) -> float:
    """Wall time a call of CALLS back-to-back calls, synchronised once at the end."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(CALLS):
        fn(*args)
    torch.cuda.synchronize()
    return round((time.perf_counter() - t0) / CALLS * 1e6, 2)


def _measure(kernel_type: str, shape: dict, overrides: dict, workdir: Path, backend: str = "triton") -> LaunchCost:
    row = LaunchCost(kernel_type, shape, overrides)
    try:
        kf = kernelfile.load(starter_kernel(kernel_type, backend))
        source = kf.with_config({**kf.config, **overrides}).source
        path = workdir / f"{kernel_type}_{kernelfile.source_hash(source)}.py"
        path.write_text(source)
        module = _import(path)
        spec = get_spec(kernel_type)
        gen = torch.Generator(device="cuda").manual_seed(0)
        inputs = spec.make_inputs(dict(shape), torch.bfloat16, "cuda", gen)
        for _ in range(5):  # compile, then warm the launch caches
            module.kernel_fn(*inputs)
            spec.eager_fn()(*inputs)
        row.host_us = _per_call_us(module.kernel_fn, *inputs)
        if backend == "cuda":
            row.eager_us = _per_call_us(spec.eager_fn(), *inputs)
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


def launch_steps() -> dict[str, float]:
    """Host us a call of each step of one CUDA reduce launch (16x200 bf16: the GPU work is ~2 us)."""
    import ctypes

    from cuda.bindings import driver

    from autokernel_ci import nvrtc

    module = _import(starter_kernel("reduce", "cuda"))
    x = torch.randn(16, 200, device="cuda", dtype=torch.bfloat16)
    y = torch.empty(16, device="cuda", dtype=torch.bfloat16)
    name = "reduce_bf16_n"
    threads = module.CONFIG["THREADS"]
    grid, block = (1,), (threads,)
    args = (y, x, nvrtc.i32(16), nvrtc.i32(200))

    def build():
        return nvrtc.compile_kernel(module.CUDA_SOURCE, name, defines=module._defines(), source_name="reduce.cu")

    kernel = build()
    core = nvrtc._core()
    dev = torch.cuda.current_device()
    stream = nvrtc._stream(dev)
    config = core.LaunchConfig(grid=grid, block=block, shmem_size=0)
    values = nvrtc.kernel_args(args, dev)
    raw = getattr(kernel.handle, "handle", kernel.handle)
    ok = driver.CUresult.CUDA_SUCCESS
    err, func = driver.cuKernelGetFunction(raw) if isinstance(raw, driver.CUkernel) else (ok, raw)
    if err != ok:
        raise RuntimeError(f"cuKernelGetFunction failed with {err!r} for the reduce kernel; the driver launch step "
                           f"needs a CUfunction (check the driver / cuda-python versions in `autokernel-ci gpu`)")
    cu_stream = driver.CUstream(torch.cuda.current_stream().cuda_stream)
    types = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int)

    def by_driver():
        params = ((y.data_ptr(), x.data_ptr(), 16, 200), types)
        driver.cuLaunchKernel(func, 1, 1, 1, threads, 1, 1, 0, cu_stream, params, 0)

    steps = {
        "kernel_fn (whole call)": lambda: module.kernel_fn(x),
        "torch.empty (the output)": lambda: torch.empty((16,), dtype=x.dtype, device=x.device),
        "nvrtc.compile_kernel (a cache hit)": build,
        "torch.cuda.is_available": torch.cuda.is_available,
        "torch.cuda.current_device": torch.cuda.current_device,
        "nvrtc.device_arch": nvrtc.device_arch,
        "Module.kernel (a loaded handle)": lambda: kernel.module.kernel(name),
        "torch.cuda.current_stream().cuda_stream": lambda: torch.cuda.current_stream(dev).cuda_stream,
        "torch._C._cuda_getCurrentRawStream": lambda: torch._C._cuda_getCurrentRawStream(dev),
        "nvrtc.kernel_args": lambda: nvrtc.kernel_args(args, dev),
        "nvrtc._stream": lambda: nvrtc._stream(dev),
        "core.LaunchConfig": lambda: core.LaunchConfig(grid=grid, block=block, shmem_size=0),
        "nvrtc.launch": lambda: nvrtc.launch(kernel, grid=grid, block=block, args=args),
        "core.launch (prebuilt config and args)": lambda: core.launch(stream, config, kernel.handle, *values),
        "driver.cuLaunchKernel": by_driver,
    }
    for fn in steps.values():  # warm every path once
        fn()
    return {label: _per_call_us(fn) for label, fn in steps.items()}


def render(rows: list[LaunchCost], steps: dict[str, float] | None = None) -> str:
    lines = [f"{'type':16} {'config':28} {'host us/call':>12} {'eager us/call':>13}"]
    for r in rows:
        lines.append(f"{r.kernel_type:16} {json.dumps(r.config):28} {r.host_us:12.1f} {r.eager_us:13.1f} {r.error}")
    if steps:
        lines += ["", "one CUDA reduce launch, step by step (us a call)"]
        lines += [f"  {label:42} {us:8.2f}" for label, us in steps.items()]
    for r in rows:
        lines += ["", f"{r.kernel_type} {json.dumps(r.config)}: ncalls tottime percall cumtime percall function"]
        lines += [f"  {t}" for t in r.top]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--backend", choices=("triton", "cuda"), default="triton")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("launch_overhead.py needs a CUDA GPU", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.out / "points"
    work.mkdir(exist_ok=True)
    if args.backend == "triton":
        rows = [_measure(kt, shape, cfg, work) for kt, shape, cfg in POINTS]
        steps = None
    else:
        rows = [_measure(kt, get_spec(kt).shapes(CUDA_SET)[0], {}, work, "cuda") for kt in KERNEL_TYPES]
        try:
            steps = launch_steps()
        except Exception as exc:  # recorded; the per-type rows above still count
            steps = {f"failed: {type(exc).__name__}: {str(exc)[:200]}": 0.0}
    name = "launch_overhead.json" if args.backend == "triton" else "launch_overhead_cuda.json"
    (args.out / name).write_text(json.dumps({"rows": [asdict(r) for r in rows], "steps": steps}, indent=1))
    print(render(rows, steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
