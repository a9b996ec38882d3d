"""Does the verification's torch.profiler session slow the harness timings that follow it? (GPU; not a test)

In the search-agent round on the GPT-2 shapes (docs/benchmarks/h200.md) the loop's harness timed the
rotary eager baseline at 158.8 us and the layernorm starter at 49.0 us where `do_bench` in a fresh
process measures 67.2 and 13.9 us. One suspect: the loop's worker verifies a candidate before it
benches it, and verification watches the candidate's launches through torch.profiler (CUPTI), which
may stay attached after the profiler exits and add host time to every later kernel launch.

This script times the same calls with the harness's own timer (`harness.timing.time_calls`) three
ways, each in a fresh subprocess: before any profiler session, after one `calls.launch_tracker`
session (what verification does), and the same with TEARDOWN_CUPTI=1 in the environment.

    python benchmarks/profiler_aftereffect.py --out OUT
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

CASES = ("rotary_embedding", "layernorm", "rmsnorm", "reduce")
MODES = {"fresh": ({}, False), "after_profiler": ({}, True), "after_profiler_teardown": ({"TEARDOWN_CUPTI": "1"}, True)}


def measure(profile_first: bool, device: str, shape_set: str) -> dict:
    """Child process: time eager and the Triton starter per case; optionally run one profiler session first."""
    import torch

    from autokernel_ci.harness import calls, loader, timing
    from autokernel_ci.paths import starter_kernel
    from autokernel_ci.specs import get_spec

    dev = torch.device(device)
    rows = {}
    for kind in CASES:
        spec = get_spec(kind)
        shape = dict(spec.shape_sets[shape_set][0])
        dtype = torch.float16 if dev.type == "cuda" else torch.float32
        inputs = spec.make_inputs(shape, dtype, dev, torch.Generator(device=dev).manual_seed(0))
        cand = loader.load_candidate(starter_kernel(kind, "triton"), device=device)
        if profile_first:
            with calls.launch_tracker(cand.module_name, cand.kernel_names, dev):
                cand.fn(*inputs)
        fns = {"eager": lambda s=spec, i=inputs: s.eager_fn()(*i), "starter": lambda c=cand, i=inputs: c.fn(*i)}
        rows[f"{kind} {spec.describe_shape(shape)}"] = {n: t.median_us for n, t in timing.time_calls(fns, dev).items()}
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", default="cuda", help="cpu only smoke-tests the script (Triton interpreter)")
    ap.add_argument("--shape-set", default="gpt2")
    ap.add_argument("--child", choices=sorted(MODES), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(measure(MODES[args.child][1], args.device, args.shape_set)))
        return 0
    results = {}
    for mode, (env, _) in MODES.items():
        proc = subprocess.run([sys.executable, __file__, "--out", str(args.out), "--child", mode, "--device",
                               args.device, "--shape-set", args.shape_set],
                              capture_output=True, text=True, env={**os.environ, **env}, timeout=300, check=False)
        results[mode] = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else \
            {"error": proc.stderr[-2000:]}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "profiler_aftereffect.json").write_text(json.dumps(results, indent=1) + "\n")
    for mode, rows in results.items():
        print(f"{mode}:")
        for case, times in rows.items():
            print(f"  {case:40s} {times}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
