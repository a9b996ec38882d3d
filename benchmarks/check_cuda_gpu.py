"""GPU check of the CUDA backend: NVRTC build times, then every CUDA starter against its spec's reference.

    python benchmarks/check_cuda_gpu.py [--types rmsnorm,softmax] [--sets cpu,edge,llama7b] [--json OUT.json]

1. builds a tiny kernel through autokernel_ci.nvrtc: cold (no cache), in-process cache hit, disk cache hit;
   launches it on torch tensors and checks the result;
2. runs each starter in kernels/cuda/ on the named shape sets for every dtype of its spec and
   checks compare() against spec.run_reference (memory poisoned with NaN first, inputs checked
   unmodified), with a rough median time at the llama7b shapes.
Each kernel type runs in its own child process (an illegal address poisons the CUDA context), up
to --jobs at a time; a failure is reported and the run goes on. Exit 0 only when every case passes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SETS = ("cpu", "edge", "llama7b")
POISON_BYTES = 1 << 28  # 256 MiB of NaN handed back to the caching allocator before each call
CHILD_TIMEOUT_S = 300
TINY = r"""
extern "C" __global__ void axpb(float* y, const float* x, float a, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + B;
}
"""


def check_build_times() -> dict:
    import torch

    from autokernel_ci import nvrtc

    out: dict = {"arch": nvrtc.device_arch(), "toolchain": nvrtc.toolchain_version(), "include": nvrtc.include_dirs()}
    source = TINY + f"// {time.time_ns()}\n"  # never seen before: a true cold build
    with tempfile.TemporaryDirectory() as cache:
        os.environ[nvrtc.CACHE_ENV] = cache
        t0 = time.perf_counter()
        kernel = nvrtc.compile_kernel(source, "axpb", defines={"B": 1})
        out["cold_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        nvrtc.compile_kernel(source, "axpb", defines={"B": 1})
        out["memory_hit_s"] = time.perf_counter() - t0
        nvrtc.clear_cache()
        t0 = time.perf_counter()
        kernel = nvrtc.compile_kernel(source, "axpb", defines={"B": 1})
        out["disk_hit_s"] = time.perf_counter() - t0
        out["disk_hit_origin"] = kernel.module.origin
    os.environ.pop(nvrtc.CACHE_ENV, None)
    n = 10_000
    x = torch.randn(n, device="cuda")
    y = torch.full_like(x, float("nan"))
    nvrtc.launch(kernel, grid=(n + 255) // 256, block=256, args=(y, x, nvrtc.f32(2.0), nvrtc.i32(n)))
    torch.cuda.synchronize()
    out["launch_ok"] = bool(torch.allclose(y, 2 * x + 1))
    t0 = time.perf_counter()
    for _ in range(100):
        nvrtc.launch(kernel, grid=(n + 255) // 256, block=256, args=(y, x, nvrtc.f32(2.0), nvrtc.i32(n)))
    torch.cuda.synchronize()
    out["launch_overhead_us"] = (time.perf_counter() - t0) / 100 * 1e6
    return out


def _median_ms(fn, inputs, reps: int = 5) -> float:
    import torch

    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*inputs)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def run_type(kernel_type: str, sets: list[str]) -> list[dict]:
    """Every shape x dtype of one kernel type, in this process."""
    import torch

    from autokernel_ci.compare import compare
    from autokernel_ci.specs import get_spec

    spec = get_spec(kernel_type)
    path = ROOT / "kernels" / "cuda" / f"{kernel_type}.py"
    mod_spec = importlib.util.spec_from_file_location(f"cuda_{kernel_type}", path)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    dev = torch.device("cuda")
    rows = []
    for set_name in sets:
        for shape in spec.shapes(set_name):
            for dtype in spec.dtypes:
                row = {"type": kernel_type, "set": set_name, "shape": spec.describe_shape(shape),
                       "dtype": str(dtype).replace("torch.", ""), "ok": False, "detail": "", "ms": None}
                try:
                    gen = torch.Generator(device=dev).manual_seed(1234)
                    inputs = spec.make_inputs(shape, dtype, dev, gen)
                    before = [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]
                    torch.empty(POISON_BYTES // 4, device=dev).fill_(float("nan"))  # freed: reused by the kernel
                    t0 = time.perf_counter()
                    out = module.kernel_fn(*inputs)
                    torch.cuda.synchronize()
                    row["first_call_s"] = round(time.perf_counter() - t0, 3)  # includes the NVRTC build
                    changed = [i for i, (a, b) in enumerate(zip(inputs, before, strict=True))
                               if isinstance(a, torch.Tensor) and not torch.equal(a, b)]
                    ref = spec.run_reference(inputs)
                    failure = compare(out, ref, spec.tolerances[dtype], expect_dtype=spec.output_dtype or dtype)
                    if changed:
                        row["detail"] = f"inputs {changed} modified"
                    elif failure is not None:
                        row["detail"] = f"{failure.check}: {failure.message}"
                    else:
                        row["ok"] = True
                    del ref
                    if set_name == "llama7b":
                        row["ms"] = round(_median_ms(module.kernel_fn, inputs), 4)
                except Exception as exc:  # noqa: BLE001 - report and go on
                    row["detail"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
                    row["traceback"] = traceback.format_exc(limit=3)
                    if "CUDA error" in str(exc) or type(exc).__name__ == "AcceleratorError":
                        rows.append(row)
                        return rows  # the context is poisoned: the parent reports the rest as not run
                rows.append(row)
    return rows


def _child(kernel_type: str, sets: list[str]) -> list[dict]:
    cmd = [sys.executable, __file__, "--child", kernel_type, "--sets", ",".join(sets)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, cwd=ROOT, check=False)
    except subprocess.TimeoutExpired:
        return [{"type": kernel_type, "set": "-", "shape": "-", "dtype": "-", "ok": False,
                 "detail": f"timed out after {CHILD_TIMEOUT_S} s", "ms": None}]
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("ROWS "):
            return json.loads(line[5:])
    return [{"type": kernel_type, "set": "-", "shape": "-", "dtype": "-", "ok": False,
             "detail": f"child exited {proc.returncode}: {(proc.stderr or proc.stdout)[-400:]}", "ms": None}]


def render(build: dict, rows: list[dict]) -> str:
    lines = ["NVRTC build: " + ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                                         for k, v in build.items()), ""]
    header = f"{'type':<17} {'set':<8} {'shape':<34} {'dtype':<9} {'result':<6} {'ms':>9}  detail"
    lines += [header, "-" * len(header)]
    for r in rows:
        ms = f"{r['ms']:.4f}" if r.get("ms") is not None else ""
        lines.append(f"{r['type']:<17} {r['set']:<8} {r['shape'][:34]:<34} {r['dtype']:<9} "
                     f"{'PASS' if r['ok'] else 'FAIL':<6} {ms:>9}  {r['detail'][:160]}")
    passed = sum(r["ok"] for r in rows)
    lines += ["", f"{passed} passed, {len(rows) - passed} failed"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", default="", help="comma-separated kernel types (default: all nine)")
    parser.add_argument("--sets", default=",".join(DEFAULT_SETS))
    parser.add_argument("--jobs", type=int, default=3, help="kernel types checked at once (one GPU is shared)")
    parser.add_argument("--json", default="", help="also write the results here")
    parser.add_argument("--out", default="", help="directory: writes OUT/check_cuda.json (on_device.sh passes it)")
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sets = [s for s in args.sets.split(",") if s]
    sys.path.insert(0, str(ROOT))
    if args.child:
        print("ROWS " + json.dumps(run_type(args.child, sets)), flush=True)
        return 0
    from autokernel_ci.specs import KERNEL_TYPES

    types = [t for t in args.types.split(",") if t] or list(KERNEL_TYPES)
    try:
        build = check_build_times()
    except Exception as exc:  # noqa: BLE001
        build = {"error": f"{type(exc).__name__}: {exc}"}
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = [r for result in pool.map(lambda t: _child(t, sets), types) for r in result]
    print(render(build, rows))
    if args.out and not args.json:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        args.json = str(Path(args.out) / "check_cuda.json")
    if args.json:
        Path(args.json).write_text(json.dumps({"build": build, "rows": rows}, indent=1, default=str))
    return 0 if rows and all(r["ok"] for r in rows) and build.get("launch_ok") else 1


if __name__ == "__main__":
    raise SystemExit(main())
