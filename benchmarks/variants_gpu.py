"""Check and time many CONFIG points of one starter in one GPU call (run by hand on the H200; not a test).

For each point of a variants file (benchmarks/variants/<type>.json: a list of CONFIG overrides, or
{"grid": {key: [values]}} for a product), the starter is rewritten with that CONFIG
(KernelFile.with_config, as the search agent does), checked against the spec's reference on the
--sets shape sets in --dtype, then timed at the --time-set shapes with triton.testing.do_bench
(median, L2 flushed) next to PyTorch eager. A point that fails to compile or is wrong is recorded as
such and the run goes on. Prints a table sorted by speed per shape and writes variants_<type>.json.
A point with the key "_file" (a path from the repository root) runs on that kernel file instead of
the starter: an earlier version next to the current one, alternating in one process, e.g.
`git show HEAD:kernels/cuda/flash_attention.py > benchmarks/variants/base/cuda_flash_attention_HEAD.py`
(benchmarks/variants/base/ is git-ignored: pass it to the device tool's carry).

    python benchmarks/variants_gpu.py matmul --out /tmp/v
    python benchmarks/variants_gpu.py matmul --variants benchmarks/variants/matmul.json --backend triton --out /tmp/v
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_starters_gpu import DTYPES, Baselines, _bench, _import, _short, check_correctness  # noqa: E402

from autokernel_ci import kernelfile  # noqa: E402
from autokernel_ci.paths import starter_kernel  # noqa: E402
from autokernel_ci.specs import get_spec  # noqa: E402

VARIANTS_DIR = Path(__file__).resolve().parent / "variants"
REPO = VARIANTS_DIR.parents[1]
FILE_KEY = "_file"  # a point's key naming another kernel file (path from the repository root) to run it on


def load_points(path: Path) -> list[dict]:
    data = json.loads(path.read_text())
    if isinstance(data, dict):
        grid = data["grid"]
        points = [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]
        return [{**data.get("fixed", {}), **p} for p in points] + list(data.get("extra", []))
    return list(data)


def run_point(kf: kernelfile.KernelFile, overrides: dict, args, baselines: Baselines, workdir: Path) -> dict:
    spec = get_spec(kf.kernel_type)
    row: dict = {"config": overrides, "checks": "", "times": {}}
    t0 = time.perf_counter()
    try:
        overrides = dict(overrides)
        other = overrides.pop(FILE_KEY, None)
        if other is not None:  # this point runs another version of the kernel file (e.g. the last commit's)
            kf = kernelfile.load(REPO / other)
        cfg = {**kf.config, **overrides}
        path = workdir / f"{kf.kernel_type}_{kernelfile.source_hash(kf.with_config(cfg).source)}.py"
        path.write_text(kf.with_config(cfg).source)
        module = _import(path)
        checks = check_correctness(module, kf.kernel_type, args.sets, [DTYPES[args.dtype]], args.seed, args.device)
        bad = [c for c in checks if not c.ok]
        row["checks"] = f"{len(checks) - len(bad)}/{len(checks)}"
        if bad:
            row["error"] = f"wrong on {bad[0].shape} {bad[0].dtype}: {bad[0].message[:200]}"
            return row
        for shape in spec.shape_sets[args.time_set]:
            label = spec.describe_shape(shape)
            gen = torch.Generator(device=args.device).manual_seed(args.seed)
            inputs = spec.make_inputs(dict(shape), DTYPES[args.dtype], args.device, gen)
            ours = _bench(lambda: module.kernel_fn(*inputs), args.warmup, args.rep)  # noqa: B023
            graph = _bench_graph(lambda: module.kernel_fn(*inputs), args.rep) if args.graph else None  # noqa: B023
            eager, _ = baselines.times(kf.kernel_type, label, DTYPES[args.dtype], inputs, args.warmup, args.rep)
            flops = spec.flops(shape)
            row["times"][label] = {"us": round(ours, 2), "eager_us": round(eager, 2),
                                   "x_eager": round(eager / ours, 3),
                                   "graph_us": None if graph is None else round(graph, 2),
                                   "tflops": round(flops / ours / 1e6, 1) if spec.primary_metric == "TFLOP/s" else None,
                                   "gbps": round(spec.bytes_moved(shape, DTYPES[args.dtype]) / ours / 1e3, 1)}
    except Exception as exc:  # a point that does not compile or launch: record, go on
        row["error"] = _short(exc)
    finally:
        row["seconds"] = round(time.perf_counter() - t0, 1)
        torch.cuda.empty_cache()
    return row


def _bench_graph(fn, rep_ms: int) -> float | None:
    """Microseconds per call replayed from a CUDA graph: the GPU time without the Python launch path.
    Far below the do_bench figure means the call is bound by host overhead, not by the kernel."""
    from triton.testing import do_bench_cudagraph

    try:
        return float(do_bench_cudagraph(fn, rep=rep_ms, return_mode="median")) * 1e3
    except Exception:  # noqa: BLE001 - a launch path that cannot be captured just has no graph figure
        return None


def render(kernel_type: str, rows: list[dict]) -> str:
    labels = sorted({label for r in rows for label in r["times"]})
    lines = []
    for label in labels:
        timed = sorted((r for r in rows if label in r["times"]), key=lambda r: r["times"][label]["us"])
        lines.append(f"\n{kernel_type} {label}: eager {timed[0]['times'][label]['eager_us'] if timed else '-'} us")
        for r in timed:
            t = r["times"][label]
            rate = f"{t['tflops']} TFLOP/s" if t["tflops"] is not None else f"{t['gbps']} GB/s"
            graph = f"graph {t['graph_us']:8.2f} us" if t.get("graph_us") is not None else ""
            lines.append(f"  {t['us']:10.2f} us  x{t['x_eager']:.3f} eager  {rate:>14s}  {graph}  "
                         f"{json.dumps(r['config'])}")
    failed = [r for r in rows if r.get("error")]
    if failed:
        lines.append(f"\n{kernel_type}: {len(failed)} point(s) failed")
        lines += [f"  {json.dumps(r['config'])}: {r['error']}" for r in failed]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kernel_type")
    ap.add_argument("--backend", default="triton", choices=("triton", "cuda"))
    ap.add_argument("--variants", type=Path, default=None, help="JSON file (default benchmarks/variants/TYPE.json)")
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--sets", default="llama7b,odd,edge", help="shape sets checked before timing")
    ap.add_argument("--time-set", default="llama7b")
    ap.add_argument("--warmup", type=int, default=25)
    ap.add_argument("--rep", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--graph", action="store_true", help="also time each point replayed from a CUDA graph")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    args.sets = [s for s in args.sets.split(",") if s]
    args.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    kf = kernelfile.load(starter_kernel(args.kernel_type, args.backend))
    points = load_points(args.variants or VARIANTS_DIR / f"{args.kernel_type}.json")
    baselines = Baselines(use_compile=False)
    rows: list[dict] = []
    args.out.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"

    def write() -> None:  # after every point: a run cut short by its time limit keeps what it measured
        (args.out / f"variants_{args.kernel_type}.json").write_text(json.dumps(
            {"gpu": gpu, "torch": torch.__version__, "dtype": args.dtype, "starter": kf.config, "rows": rows},
            indent=1) + "\n")

    with tempfile.TemporaryDirectory() as tmp:
        for i, overrides in enumerate(points):
            row = run_point(kf, overrides, args, baselines, Path(tmp))
            rows.append(row)
            write()
            summary = row.get("error") or "  ".join(f"{k}: {v['us']} us x{v['x_eager']}"
                                                    for k, v in row["times"].items())
            print(f"[{i + 1}/{len(points)}] {json.dumps(overrides)} ({row['seconds']} s): {summary}", flush=True)
    print(render(args.kernel_type, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
