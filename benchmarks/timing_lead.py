"""Does the harness timer measure GPU time when the host falls behind? (GPU; not a test)

The search loop times candidate, eager and torch.compile interleaved. When one round of those calls
costs the host more than the GPU, the GPU queue drains and CUDA events time the host's launch latency
(the loop put the layernorm starter at 49.0 us where do_bench says 13.9 us). harness.timing now puts
a GPU-side spin (LEAD_US) after each L2 flush. This script times the same calls the loop times
(eager, the Triton starter, torch.compile) with `timing.time_calls(..., lead=False)` and with the lead,
and the eager and starter calls replayed from a CUDA graph (no host work at all: the GPU-only time the
harness should report).

    python benchmarks/timing_lead.py --out OUT [--shape-set gpt2] [--dtype fp16]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from autokernel_ci.harness import baselines, loader, timing
from autokernel_ci.harness.stages import dtype_from_name
from autokernel_ci.paths import starter_kernel
from autokernel_ci.specs import get_spec

CASES = ("rotary_embedding", "layernorm", "rmsnorm", "reduce", "softmax")
GRAPH_REPLAYS = 50


def graph_us(fn, device: torch.device) -> float:
    """Median GPU time of fn replayed from a CUDA graph, L2 flushed (outside the graph) before each replay."""
    stream = torch.cuda.Stream(device)
    with torch.cuda.stream(stream):
        fn()  # warm-up on the capture stream
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            fn()
    torch.cuda.synchronize(device)
    samples = []
    for _ in range(GRAPH_REPLAYS):
        timing._flush_l2(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0)
    return timing.summarize(samples).median_us


def measure(shape_set: str, dtype_name: str, device: torch.device) -> dict:
    dtype = dtype_from_name(dtype_name)
    rows = {}
    for kind in CASES:
        spec = get_spec(kind)
        shape = dict(spec.shape_sets[shape_set][0])
        inputs = spec.make_inputs(shape, dtype, device, torch.Generator(device=device).manual_seed(0))
        cand = loader.load_candidate(starter_kernel(kind, "triton"), device=str(device))
        key = (tuple(sorted(shape.items())), str(dtype))
        fns = {"eager": lambda s=spec, i=inputs: baselines.eager(s)(*i),
               "starter": lambda c=cand, i=inputs: c.fn(*i),
               "compiled": lambda s=spec, k=key, i=inputs: baselines.compiled(s, k)(*i)}
        row = {}
        for lead in (False, True):
            times = timing.time_calls(fns, device, lead=lead)
            row["lead" if lead else "no_lead"] = {n: t.median_us for n, t in times.items()}
        row["graph"] = {n: round(graph_us(fns[n], device), 3) for n in ("eager", "starter")}
        rows[f"{kind} {spec.describe_shape(shape)}"] = row
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shape-set", default="gpt2")
    ap.add_argument("--dtype", default="fp16")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("timing_lead.py needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    rows = measure(args.shape_set, args.dtype, device)
    result = {"gpu": torch.cuda.get_device_name(device), "torch": torch.__version__, "shape_set": args.shape_set,
              "dtype": args.dtype, "lead_us": timing.LEAD_US, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "timing_lead.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"{'case':42s} {'impl':9s} {'no lead':>9s} {'lead':>9s} {'graph':>9s}  (us, median)")
    for case, row in rows.items():
        for impl in ("eager", "starter", "compiled"):
            graph = row["graph"].get(impl)
            print(f"{case:42s} {impl:9s} {row['no_lead'][impl]:9.1f} {row['lead'][impl]:9.1f} "
                  f"{graph if graph is not None else float('nan'):9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
