"""Harness speed and exploit suite on the GPU (run by the lead on the H200):

    bash benchmarks/on_device.sh 600 benchmarks/harness_overhead.py
    python benchmarks/harness_overhead.py --out OUT [--candidates 10] [--device cuda]

1. Loop speed: a warm Evaluator verifies + benches 10 candidates of each Triton starter (rmsnorm,
   softmax; CONFIG points from its SEARCH_SPACE) at LLaMA-7B shapes in bf16, with the model shape as
   an extra sweep shape, baselines on the first candidate only (the loop's pattern). Prints
   seconds per candidate and experiments/hour (goal: <= 10 s, >= 360/h).
2. Exploit suite on this device: every exploit in tests/harness/exploits must be rejected for the
   expected check, every control must pass. Prints rejected/tried and controls passed/tried.
Writes OUT/harness_overhead.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPLOITS = ROOT / "tests" / "harness" / "exploits"
FIXTURES = ROOT / "tests" / "harness" / "fixtures"

# exploit -> checks that may reject it on CUDA (the CPU suite pins the stage too; see the tests).
GPU_REJECTED = {
    "cached_result.py": {"caching"}, "partial_write.py": {"poisoned_output"},
    "ignored_weight.py": {"ignored_argument"}, "input_mutation.py": {"input_mutated"},
    "output_alias.py": {"aliasing"}, "calls_torch_softmax.py": {"forbidden_op"}, "nan_output.py": {"nan_inf"},
    "numpy_bypass.py": {"kernel_ran"}, "gc_reference_thief.py": {"poisoned_output"},
    "reduced_precision.py": {"allclose"}, "nondeterministic.py": {"nondeterministic"},
    "shape_special.py": {"poisoned_output", "allclose"}, "monkeypatch_torch.py": {"tampering"},
    "monkeypatch_checker.py": {"tampering"}, "side_stream.py": {"side_stream", "poisoned_output"},
    "memoized.py": {"below_physical_floor"}, "profiler_spoof.py": {"tampering"},
}
GPU_FAULTS = {"fault_raises.py": "crash", "fault_oom.py": "oom", "fault_compile_error.py": "compile_error",
              "fault_exit.py": "crash", "fault_segfault.py": "crash", "fault_hangs.py": "timeout"}
CONTROLS = [FIXTURES / "softmax_honest.py", FIXTURES / "rmsnorm_honest.py", EXPLOITS / "env_reader.py",
            EXPLOITS / "seed_at_import.py"]


def loop_speed(ev, kernel_type: str, n: int, device: str) -> dict:
    from autokernel_ci import kernelfile
    from autokernel_ci.paths import starter_kernel
    from autokernel_ci.specs import get_spec

    spec = get_spec(kernel_type)
    kf = kernelfile.load(starter_kernel(kernel_type))
    shape = spec.model_shape() if device == "cuda" else spec.shapes("cpu")[0]
    rows = []
    for i, cfg in enumerate(itertools.islice(kf.config_points(), n)):
        source = kf.with_config(cfg).source
        t0 = time.perf_counter()
        verdict, bench = ev.evaluate(source, extra_shapes=[shape], bench_shapes=[shape], dtype="bfloat16",
                                     baselines=(i == 0), label=f"{kernel_type}#{i}")
        seconds = time.perf_counter() - t0
        row = {"i": i, "config": cfg, "status": verdict.status.value, "seconds": round(seconds, 3),
               "stage_s": {s.name: s.duration_s for s in verdict.stages}, "reason": verdict.reason[:200]}
        if bench is not None:
            r = bench.rows[0]
            row.update(median_us=r.candidate.median_us, value=r.value, metric=r.metric, pct=r.pct_of_ceiling,
                       eager_us=r.eager.median_us if r.eager else None,
                       compile_us=r.compiled.median_us if r.compiled else None)
        rows.append(row)
        print(f"  {kernel_type} #{i} {verdict.status.value:8s} {seconds:6.2f} s  "
              f"{row.get('value', 0):8.1f} {row.get('metric', '')}  {cfg}", flush=True)
    steady = [r["seconds"] for r in rows[1:]] or [rows[0]["seconds"]]
    per = statistics.median(steady)
    print(f"{kernel_type}: median {per:.2f} s per candidate (after the first) -> {3600 / per:.0f} experiments/hour")
    return {"kernel_type": kernel_type, "rows": rows, "median_s": per, "per_hour": 3600 / per}


def exploit_suite(ev, device: str) -> dict:
    from autokernel_ci import kernelfile
    from autokernel_ci.specs import get_spec

    results = {"rejected": [], "missed": [], "controls_passed": [], "controls_failed": []}
    for name, checks in {**GPU_REJECTED, **{k: {v} for k, v in GPU_FAULTS.items()}}.items():
        source = (EXPLOITS / name).read_text()
        spec = get_spec(kernelfile.parse(source).kernel_type)
        shape = spec.model_shape() if device == "cuda" else spec.shapes("cpu")[0]
        verdict, _ = ev.evaluate(source, dtype="float32" if "precision" in name or "nondet" in name else None,
                                 bench_shapes=[shape], baselines=False, label=name)
        failure = next((f for s in verdict.stages for f in s.failures), None)
        got = {failure.check} if failure else set()
        got |= {verdict.status.value}
        got |= {k for k, v in verdict.hardening.items() if v.startswith("fail")}
        ok = verdict.status.value != "pass" and bool(got & checks)
        results["rejected" if ok else "missed"].append({"exploit": name, "expected": sorted(checks),
                                                        "status": verdict.status.value, "reason": verdict.reason[:300]})
        print(f"  {'REJECTED' if ok else 'MISSED  '} {name:26s} {verdict.status.value:13s} {verdict.reason[:110]!r}",
              flush=True)
    return results


def control_suite(ev, device: str, results: dict) -> dict:
    """The honest controls, in their own Evaluator at the production timeout (DEFAULT_TIMEOUT_S).

    Not under --exploit-timeout: a control's first verify in a fresh worker compiles one Triton
    specialisation per (row width, dtype) of every shape set: on the H200 softmax_honest.py took
    64.6 s that way, so a 60 s hang limit rejected an honest kernel."""
    from autokernel_ci import kernelfile
    from autokernel_ci.specs import get_spec

    for path in CONTROLS:
        # Timed the way the exploits are (the model shape, no baselines), every dtype verified.
        source = path.read_text()
        spec = get_spec(kernelfile.parse(source).kernel_type)
        shape = spec.model_shape() if device == "cuda" else spec.shapes("cpu")[0]
        t0 = time.perf_counter()
        verdict, _ = ev.evaluate(source, bench_shapes=[shape], baselines=False, label=path.name)
        seconds = round(time.perf_counter() - t0, 2)
        key = "controls_passed" if verdict.passed else "controls_failed"
        results[key].append({"control": path.name, "seconds": seconds, "status": verdict.status.value,
                             "reason": verdict.reason[:300]})
        print(f"  {'PASS' if verdict.passed else 'FALSE REJECT'} {path.name:26s} {seconds:6.1f} s "
              f"{verdict.reason[:110]!r}", flush=True)
    tried = len(results["rejected"]) + len(results["missed"])
    print(f"exploits rejected {len(results['rejected'])}/{tried}; controls passed "
          f"{len(results['controls_passed'])}/{len(CONTROLS)}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=".gpu_out")
    parser.add_argument("--candidates", type=int, default=10)
    parser.add_argument("--device", default=None, choices=("cuda", "cpu"))
    parser.add_argument("--skip-exploits", action="store_true")
    parser.add_argument("--exploit-timeout", type=float, default=30.0,
                        help="seconds before a hanging candidate is killed (fault_hangs.py waits this long)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from autokernel_ci.harness import Evaluator
    from autokernel_ci.harness.devices import default_device

    device = args.device or default_device()
    report = {"device": device}
    t0 = time.perf_counter()
    if args.candidates > 0:  # --candidates 0: the exploit suite only
        with Evaluator(device, timeout_s=300) as ev:
            report["loop"] = [loop_speed(ev, k, args.candidates, device) for k in ("rmsnorm", "softmax")]
            report["worker_startup_s"] = ev.last_startup_s
    if not args.skip_exploits:
        with Evaluator(device, timeout_s=args.exploit_timeout) as ev:
            report["exploits"] = exploit_suite(ev, device)
            report["worker_restarts"] = ev.restarts
        with Evaluator(device) as ev:
            report["exploits"] = control_suite(ev, device, report["exploits"])
    report["total_s"] = round(time.perf_counter() - t0, 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "harness_overhead.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    missed = report.get("exploits", {}).get("missed", [])
    false_rejects = report.get("exploits", {}).get("controls_failed", [])
    return 1 if missed or false_rejects else 0


if __name__ == "__main__":
    sys.exit(main())
