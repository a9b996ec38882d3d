"""How fast can a read-only kernel go? The reduce starters against read ceilings (run by hand on a GPU; not a test).

Issue #7 measures the reduce (x.sum(-1), bf16 8192 x 8192: 128 MiB read, 16 KiB written) against a same-bytes
copy; a kernel that only reads is not bound by a copy's read / write turnaround. This script times, at one shape:

- ours: the CUDA and Triton reduce starters as they are (ours_cuda, ours_triton), and at each CONFIG override of
  --cuda-configs / --triton-configs (ours_cuda_1, ..., ours_triton_1, ...);
- eager / compile: x.sum(-1) and torch.compile of it;
- flat_sum: torch.sum over the flattened tensor into fp32 (CUB's device reduction, a tuned read stream);
- stream_T_U: a persistent grid-stride read of x in 16-byte evict-first loads, U in flight a thread, T threads a
  block, 2048 threads an SM (XORed into one word a thread: the bandwidth of reading, nothing else);
- copy: a device copy moving the same bytes (half read, half written), the ceiling the tables use.

Each is timed under two L2 flushes, since triton's do_bench flushes by zeroing a 256 MiB buffer and so leaves the L2
full of dirty lines that the timed kernel's reads must first write back:
- dirty: zero a 256 MiB buffer before every call (do_bench's flush);
- clean: read a 256 MiB buffer before every call (the L2 then holds clean lines: nothing to write back).

Every call is timed alone with CUDA events around it; ROUNDS rounds with the candidates in turn; medians. Writes
read_ceiling.json and read_ceiling.md to --out.

    python benchmarks/read_ceiling_gpu.py --out /tmp/rc
    python benchmarks/read_ceiling_gpu.py --cuda-configs '[{"PERSISTENT": 8}, {"THREADS": 512}]' --out /tmp/rc
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_starters_gpu import _import  # noqa: E402

from autokernel_ci import kernelfile  # noqa: E402
from autokernel_ci.compare import compare  # noqa: E402
from autokernel_ci.paths import starter_kernel  # noqa: E402
from autokernel_ci.specs import get_spec  # noqa: E402

FLUSH_BYTES = 256 << 20  # > the 50 / 60 MiB L2 of an H100 / H200

STREAM_SOURCE = r"""
extern "C" __global__ void __launch_bounds__(THREADS) read_stream(const uint4* __restrict__ x, long long n,
                                                                  unsigned* __restrict__ sink) {
    const long long stride = (long long)gridDim.x * THREADS;
    long long i = (long long)blockIdx.x * THREADS + threadIdx.x;
    unsigned acc = 0;
    for (; i + (UNROLL - 1) * stride < n; i += UNROLL * stride) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) v[u] = __ldcs(x + i + u * stride);
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n; i += stride) {
        const uint4 v = __ldcs(x + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads; (almost) never stores
}
"""
STREAM_POINTS = ((256, 4), (512, 4), (1024, 2), (256, 8))  # (THREADS, UNROLL)


def _stream(x: torch.Tensor, threads: int, unroll: int) -> Callable[[], object]:
    from autokernel_ci import nvrtc

    kernel = nvrtc.compile_kernel(STREAM_SOURCE, "read_stream", defines={"THREADS": threads, "UNROLL": unroll},
                                  source_name="read_stream.cu")
    sink = torch.zeros(1, dtype=torch.int32, device=x.device)
    n = x.numel() * x.element_size() // 16
    blocks = torch.cuda.get_device_properties(x.device).multi_processor_count * (2048 // threads)
    return lambda: nvrtc.launch(kernel, grid=(blocks,), block=(threads,), args=(x, nvrtc.i64(n), sink))


def make_flushes(nbytes: int, device: torch.device) -> dict[str, Callable[[], object]]:
    """The two L2 flushes over one nbytes buffer: "dirty" zeroes it (do_bench's flush: dirty lines left in L2),
    "clean" sums it into one int64 (its lines are read, nothing is written back)."""
    buf = torch.empty(nbytes // 4, dtype=torch.int32, device=device)
    total = torch.empty((), dtype=torch.int64, device=device)
    return {"dirty": buf.zero_, "clean": lambda: torch.sum(buf, dim=0, out=total)}  # out= takes the dim overload


def _kernel(backend: str, overrides: dict, workdir: Path) -> Callable:
    """The starter's kernel_fn with CONFIG overrides (written to a file: Triton's jit reads its source)."""
    kf = kernelfile.load(starter_kernel("reduce", backend))
    path = workdir / f"reduce_{backend}_{len(list(workdir.iterdir()))}.py"
    path.write_text(kf.with_config({**kf.config, **overrides}).source if overrides else kf.source)
    return _import(path).kernel_fn


def _time(fn: Callable[[], object], flush: Callable[[], object], reps: int) -> float:
    """Median microseconds of `reps` calls, each after `flush`, each between its own two events."""
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for _ in range(5):
        flush()
        fn()
    for start, end in zip(starts, ends, strict=True):
        flush()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)) * 1e3


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=8192)
    p.add_argument("--cols", type=int, default=8192)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--cuda-configs", default="[]", help="JSON list of CONFIG overrides of the CUDA reduce to time")
    p.add_argument("--triton-configs", default="[]", help="the same for the Triton reduce")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    x = torch.randn(args.rows, args.cols, device="cuda").to(torch.bfloat16)
    half = x.view(-1)[: x.numel() // 2]
    dst = torch.empty_like(half)
    flushes = make_flushes(FLUSH_BYTES, torch.device("cuda"))
    compiled = torch.compile(lambda t: t.sum(-1))
    workdir = Path(tempfile.mkdtemp(prefix="read-ceiling-"))
    points = {backend: json.loads(text) for backend, text in (("cuda", args.cuda_configs),
                                                               ("triton", args.triton_configs))}
    ours = {f"ours_{backend}" + (f"_{i}" if i else ""): _kernel(backend, point, workdir)
            for backend, listed in points.items() for i, point in enumerate([{}, *listed])}
    candidates: dict[str, Callable[[], object]] = {
        **{name: (lambda f=f: f(x)) for name, f in ours.items()},
        "eager": lambda: x.sum(-1),
        "compile": lambda: compiled(x),
        "flat_sum": lambda: torch.sum(x.view(-1), dtype=torch.float32),
        "copy": lambda: dst.copy_(half),
        **{f"stream_{t}_{u}": _stream(x, t, u) for t, u in STREAM_POINTS},
    }
    spec = get_spec("reduce")
    expect = spec.reference(x.double()).to(torch.bfloat16)
    for name in [n for n in candidates if n.startswith("ours")]:  # a wrong kernel's time means nothing
        failure = compare(candidates[name](), expect, spec.tolerances[torch.bfloat16], expect_dtype=torch.bfloat16)
        if failure is not None:
            raise SystemExit(f"{name}: wrong against the reduce spec's reference ({failure.message}); not timed")
    times: dict[str, dict[str, list[float]]] = {f: {n: [] for n in candidates} for f in flushes}
    for _ in range(args.rounds):
        for flush_name, flush in flushes.items():
            for name, fn in candidates.items():
                times[flush_name][name].append(_time(fn, flush, args.reps))
    nbytes = x.numel() * x.element_size()
    rows = []
    for flush_name in flushes:
        for name in candidates:
            us = statistics.median(times[flush_name][name])
            rows.append({"flush": flush_name, "candidate": name, "us": round(us, 2),
                         "read_gbps": round(nbytes / us / 1e3, 1), "rounds_us": times[flush_name][name]})
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "shape": [args.rows, args.cols],
            "dtype": "bf16", "read_bytes": nbytes,
            "configs": {f"ours_{b}_{i}": p for b, listed in points.items() for i, p in enumerate(listed, 1)},
            "reps": args.reps,
            "rounds": args.rounds}
    (args.out / "read_ceiling.json").write_text(json.dumps({**meta, "rows": rows}, indent=1))
    lines = [f"# Read ceiling, {meta['gpu']}, bf16 {args.rows}x{args.cols} ({nbytes >> 20} MiB read)", "",
             "GB/s counts the bytes of x once (the copy moves the same bytes: half read, half written).", "",
             "| flush | candidate | us (median of rounds) | GB/s | rounds |", "|---|---|---:|---:|---|"]
    for r in rows:
        spread = " / ".join(f"{t:.1f}" for t in r["rounds_us"])
        lines.append(f"| {r['flush']} | {r['candidate']} | {r['us']:.1f} | {r['read_gbps']:,.0f} | {spread} |")
    (args.out / "read_ceiling.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
