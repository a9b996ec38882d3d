"""Check and time every starter kernel on a GPU (run by hand on the H200; not a test).

For each starter in kernels/triton and kernels/cuda (missing files are skipped):
1. correctness: compare() against the spec's high-precision reference on every shape set
   (llama7b, gpt2, odd, edge, cpu) at every dtype of the spec;
2. speed: the llama7b shapes in --dtype (bf16), timed with triton.testing.do_bench (L2 flushed
   before every call, median), next to PyTorch eager (the spec's `eager_fn()`: for rmsnorm the LLaMA
   module's code, for attention SDPA, for cross entropy F.cross_entropy, else the reference run in the
   input dtype) and torch.compile of that same eager function (mode default, compiled once per type).

Prints a table and writes check_starters.json and check_starters.md to --out. One kernel's failure
(exception, wrong answer, even a CUDA error) is printed and the run goes on.

    python benchmarks/check_starters_gpu.py --out /tmp/starters
    python benchmarks/check_starters_gpu.py --types softmax,rmsnorm --backends triton --skip-check
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from autokernel_ci.compare import compare
from autokernel_ci.hardware.detect import probe
from autokernel_ci.hardware.specs import load_spec
from autokernel_ci.specs import KERNEL_TYPES, get_spec
from autokernel_ci.specs.base import SHAPE_SET_NAMES

REPO = Path(__file__).resolve().parents[1]
BACKENDS = ("triton", "cuda")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def resolve_ceilings(args, spec, gpu: str, measure=None) -> str:
    """Fill args.copy_gbps / args.peak_tflops where the command line left them out, and say where they came from:
    the `measured:` section of the GPU's gpu_specs entry (H200: copy 4,269 GB/s, cuBLAS 690 TFLOP/s at the LLaMA-7B
    GEMMs, DESIGN.md §9), else hardware.calibrate on the spot (a 1 GiB copy and a bf16 8192^3 GEMM, ~2 s). A fixed
    H200 figure on another GPU misreads its rows (an H100 copies ~2,900 GB/s: 68% of the H200's ceiling at its own
    copy rate). `spec` is the detected GpuSpec (None: unknown GPU); `measure` stands in for calibrate in tests."""
    if args.copy_gbps is not None and args.peak_tflops is not None:
        return "given on the command line"
    measured = spec.measured if spec is not None else None
    if measured is not None and measured.copy_gbs and (measured.gemm_bf16_model_tflops or measured.gemm_bf16_tflops):
        # cuBLAS at model shapes where the entry has it (a GEMM of the table's size), else its large GEMM
        copy = measured.copy_gbs
        peak = measured.gemm_bf16_model_tflops[1] if measured.gemm_bf16_model_tflops else measured.gemm_bf16_tflops
        source = f"gpu_specs/{spec.key}.yaml, measured {measured.date}"
    else:
        if measure is None:
            from autokernel_ci.hardware.calibrate import calibrate

            measure = calibrate
        cal = measure(args.device.index or 0)
        source = f"measured on this {gpu} by hardware.calibrate: copy 1 GiB, bf16 GEMM {cal.gemm_shape[0]}^3"
        copy, peak = cal.copy_gbs, cal.gemm_tflops
    if args.copy_gbps is None:
        args.copy_gbps = copy
    if args.peak_tflops is None:
        args.peak_tflops = peak
    return source


@dataclass
class Check:
    shape_set: str
    shape: str
    dtype: str
    ok: bool
    message: str = ""


@dataclass
class Timing:
    shape: str
    dtype: str
    ours_us: float | None = None
    metric: str = ""
    value: float | None = None  # GB/s or TFLOP/s
    pct_of_ceiling: float | None = None
    eager_us: float | None = None
    compile_us: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    copy_us: float | None = None  # GB/s types: a device-to-device copy moving the same bytes (read + write)
    # --repeats R > 1: ours, eager and compile are timed in turn R times (the times above are the medians); the
    # lowest and highest x eager of a single round, so a ratio can be told from the spread between rounds
    eager_ratio_range: tuple[float, float] | None = None
    error: str = ""


@dataclass
class Report:
    kernel_type: str
    backend: str
    path: str
    checks: list[Check] = field(default_factory=list)
    timings: list[Timing] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0

    @property
    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]


def _import(path: Path):
    name = f"_starter_{path.parent.name}_{path.stem}_{uuid.uuid4().hex[:6]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _short(exc: BaseException) -> str:
    """One line: the first line of the message, and for Triton's CompilationError (whose first line is
    only "at L:C:") the chained cause, which says what the compiler refused."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    cause = exc.__cause__
    why = ""
    if cause is not None and str(cause).strip():
        why = f" (cause: {type(cause).__name__}: {str(cause).strip().splitlines()[-1][:200]})"
    return f"{type(exc).__name__}: {first}{why}"[:400]


def check_correctness(module, kernel_type: str, sets: list[str], dtypes: list[torch.dtype], seed: int,
                      device: torch.device) -> list[Check]:
    spec = get_spec(kernel_type)
    out: list[Check] = []
    for set_name in sets:
        for shape in spec.shape_sets.get(set_name, ()):
            for dtype in dtypes:
                if dtype not in spec.tolerances:
                    continue
                label = spec.describe_shape(shape)
                try:
                    gen = torch.Generator(device=device).manual_seed(seed)
                    inputs = spec.make_inputs(dict(shape), dtype, device, gen)
                    result = module.kernel_fn(*inputs)
                    _sync(device)
                    ref = spec.run_reference(inputs)
                    failure = compare(result, ref, spec.tolerances[dtype], expect_dtype=spec.output_dtype or dtype)
                    out.append(Check(set_name, label, str(dtype)[6:], failure is None,
                                     "" if failure is None else f"{failure.check}: {failure.message}"))
                    del inputs, result, ref
                except Exception as exc:  # keep going: report the failure, try the next shape
                    out.append(Check(set_name, label, str(dtype)[6:], False, _short(exc)))
    return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _bench(fn: Callable[[], object], warmup_ms: int, rep_ms: int) -> float:
    """Median microseconds per call: do_bench on CUDA; a wall-clock median on CPU (the script's
    own smoke test through the Triton interpreter, where the numbers mean nothing)."""
    if torch.cuda.is_available():
        from triton.testing import do_bench

        return float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")) * 1e3  # ms -> us
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e6)
    return sorted(times)[1]


class Baselines:
    """Eager and torch.compile baselines per type, compiled once and shared by both backends."""

    def __init__(self, use_compile: bool) -> None:
        self.use_compile = use_compile
        self._compiled: dict[str, Callable] = {}
        self._cache: dict[tuple[str, str, str], tuple[float | None, float | None]] = {}
        self._copies: dict[tuple[str, int], float] = {}
        self._failed_compiles: set[str] = set()

    def copy_us(self, nbytes: int, device: str, warmup: int, rep: int) -> float:
        """A plain copy of nbytes / 2 bytes (nbytes read + written): the bandwidth a kernel moving nbytes can reach at
        this size, launch and ramp included, next to the large-copy ceiling (half of it writes: a kernel that mostly
        reads may beat it)."""
        key = (str(device), int(nbytes))
        if key not in self._copies:
            src = torch.empty(int(nbytes) // 2, dtype=torch.uint8, device=device)  # byte models are floats
            dst = torch.empty_like(src)
            self._copies[key] = _bench(lambda: dst.copy_(src), warmup, rep)
            del src, dst
        return self._copies[key]

    def eager(self, kernel_type: str) -> Callable:
        return get_spec(kernel_type).eager_fn()  # the eager code a user runs today (KernelSpec.eager)

    def measure(self, kernel_type: str, label: str, inputs: tuple, warmup: int,
                rep: int) -> tuple[float | None, float | None]:
        """(eager us, torch.compile us or None), timed now."""
        eager = self.eager(kernel_type)
        eager_us = _bench(lambda: eager(*inputs), warmup, rep)
        compile_us = None
        if self.use_compile and kernel_type not in self._failed_compiles:
            if kernel_type not in self._compiled:
                self._compiled[kernel_type] = torch.compile(eager)
            compiled = self._compiled[kernel_type]
            try:
                compiled(*inputs)  # compile outside the timed region
                compile_us = _bench(lambda: compiled(*inputs), warmup, rep)
            except Exception as exc:
                self._failed_compiles.add(kernel_type)
                print(f"    torch.compile baseline failed for {kernel_type} {label}: {_short(exc)}")
        return eager_us, compile_us

    def times(self, kernel_type: str, label: str, dtype: torch.dtype, inputs: tuple, warmup: int,
              rep: int) -> tuple[float | None, float | None]:
        """measure(), once per (type, shape, dtype): both backends are compared with the same baseline run."""
        key = (kernel_type, label, str(dtype))
        if key not in self._cache:
            self._cache[key] = self.measure(kernel_type, label, inputs, warmup, rep)
        return self._cache[key]


def _alternate(t: Timing, module, kernel_type: str, label: str, inputs: tuple, baselines: Baselines, args) -> None:
    """Ours, eager and compile in turn, args.repeats rounds: medians into t, and the range of a round's x eager (a
    GPU's clock and temperature drift between rounds by more than two kernels at par differ)."""
    ours, eager, compiled = [], [], []
    for _ in range(args.repeats):
        ours.append(_bench(lambda: module.kernel_fn(*inputs), args.warmup, args.rep))
        e, c = baselines.measure(kernel_type, label, inputs, args.warmup, args.rep)
        eager.append(e)
        if c is not None:
            compiled.append(c)
    t.ours_us, t.eager_us = statistics.median(ours), statistics.median(eager)
    t.compile_us = statistics.median(compiled) if compiled else None
    ratios = [e / o for e, o in zip(eager, ours, strict=True)]
    t.eager_ratio_range = (min(ratios), max(ratios))


def time_model_shapes(module, kernel_type: str, dtype: torch.dtype, baselines: Baselines, args) -> list[Timing]:
    spec = get_spec(kernel_type)
    out: list[Timing] = []
    for shape in spec.shape_sets[args.time_set]:
        label = spec.describe_shape(shape)
        t = Timing(shape=label, dtype=str(dtype)[6:], metric=spec.primary_metric)
        try:
            gen = torch.Generator(device=args.device).manual_seed(args.seed)
            inputs = spec.make_inputs(dict(shape), dtype, args.device, gen)
            if args.repeats > 1:
                _alternate(t, module, kernel_type, label, inputs, baselines, args)
            else:
                t.ours_us = _bench(lambda: module.kernel_fn(*inputs), args.warmup, args.rep)  # noqa: B023
                t.eager_us, t.compile_us = baselines.times(kernel_type, label, dtype, inputs, args.warmup, args.rep)
            if spec.primary_metric == "TFLOP/s":
                t.value = spec.flops(shape) / (t.ours_us * 1e-6) / 1e12
                t.pct_of_ceiling = 100.0 * t.value / args.peak_tflops
            else:
                t.value = spec.bytes_moved(shape, dtype) / (t.ours_us * 1e-6) / 1e9
                t.pct_of_ceiling = 100.0 * t.value / args.copy_gbps
                t.copy_us = baselines.copy_us(spec.bytes_moved(shape, dtype), args.device, args.warmup, args.rep)
            if t.eager_us:
                t.speedup_vs_eager = t.eager_us / t.ours_us
            if t.compile_us:
                t.speedup_vs_compile = t.compile_us / t.ours_us
        except Exception as exc:
            t.error = _short(exc)
        out.append(t)
    return out


def run_one(kernel_type: str, backend: str, path: Path, baselines: Baselines, args) -> Report:
    report = Report(kernel_type, backend, str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path))
    start = time.perf_counter()
    try:
        module = _import(path)
        if not args.skip_check:
            report.checks = check_correctness(module, kernel_type, args.sets, args.check_dtypes, args.seed,
                                              args.device)
        report.timings = time_model_shapes(module, kernel_type, DTYPES[args.dtype], baselines, args)
    except Exception as exc:
        report.error = _short(exc)
        traceback.print_exc()
    finally:
        if args.device.type == "cuda":
            torch.cuda.empty_cache()
    report.seconds = time.perf_counter() - start
    return report


def _fmt(v: float | None, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def render_markdown(reports: list[Report], args, gpu: str) -> str:
    lines = [
        f"# Starter kernels on {gpu}",
        "",
        f"Timing: {args.dtype}, {args.time_set} shapes, triton.testing.do_bench median (L2 flushed), "
        f"warmup {args.warmup} ms, rep {args.rep} ms"
        + (f", ours / eager / compile timed in turn {args.repeats} times (medians; x eager's range over the "
           "rounds in brackets). " if args.repeats > 1 else ". ")
        + f"Ceilings (not the datasheet; {args.ceilings}): copy {args.copy_gbps:g} GB/s, cuBLAS-class "
        f"GEMM {args.peak_tflops:g} TFLOP/s, so a GEMM above 100% beats that figure. Same-bytes copy: a device copy "
        "moving the bytes the spec counts for that shape (read + write), timed the same way.",
        "",
        "| type | backend | shape | ours us | GB/s or TFLOP/s | % ceiling | eager us | compile us "
        "| x eager | x compile | same-bytes copy us | checks |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        checks = "not run" if not r.checks else f"{len(r.checks) - len(r.failed_checks)}/{len(r.checks)} pass"
        if r.error:
            lines.append(f"| {r.kernel_type} | {r.backend} | - | - | - | - | - | - | - | - | - | ERROR {r.error} |")
        for t in r.timings:
            spread = "" if t.eager_ratio_range is None else " ({:.2f}-{:.2f})".format(*t.eager_ratio_range)
            value = f"{_fmt(t.value)} {t.metric}" if t.value is not None else (f"ERROR {t.error}" if t.error else "-")
            lines.append(
                f"| {r.kernel_type} | {r.backend} | {t.shape} | {_fmt(t.ours_us)} | {value} | {_fmt(t.pct_of_ceiling)} "
                f"| {_fmt(t.eager_us)} | {_fmt(t.compile_us)} | {_fmt(t.speedup_vs_eager, '.2f')}{spread} "
                f"| {_fmt(t.speedup_vs_compile, '.2f')} | {_fmt(t.copy_us)} | {checks} |"
            )
    failures = [(r, c) for r in reports for c in r.failed_checks]
    if failures:
        lines += ["", "## Failed checks", "", "| type | backend | set | shape | dtype | failure |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r.kernel_type} | {r.backend} | {c.shape_set} | {c.shape} | {c.dtype} | {c.message} |"
                  for r, c in failures]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--types", default=",".join(KERNEL_TYPES), help="comma-separated kernel types (default: all nine)")
    p.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated: triton,cuda")
    p.add_argument("--out", type=Path, default=Path("check_starters_out"), help="directory for the JSON and markdown")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="dtype of the timed runs")
    p.add_argument("--sets", default=",".join(SHAPE_SET_NAMES), help="shape sets checked for correctness")
    p.add_argument("--check-dtypes", default="bf16,fp16,fp32", help="dtypes checked for correctness")
    p.add_argument("--skip-check", action="store_true", help="time only")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
    p.add_argument("--warmup", type=int, default=25, help="do_bench warmup, ms")
    p.add_argument("--rep", type=int, default=100, help="do_bench repetition time, ms")
    p.add_argument("--repeats", type=int, default=1, help="time ours, eager and compile in turn this many times "
                   "(medians and x eager's range); 1: ours once, the baselines once per type and shape")
    p.add_argument("--copy-gbps", type=float, default=None, help="bandwidth ceiling for GB/s types (default: the "
                   "GPU's gpu_specs `measured:` copy, else measured on the spot)")
    p.add_argument("--peak-tflops", type=float, default=None, help="compute ceiling for TFLOP/s types (default: the "
                   "GPU's gpu_specs `measured:` GEMM, else a bf16 GEMM measured on the spot)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-set", default="llama7b", help="shape set that is timed")
    p.add_argument("--device", default="cuda", help="cuda; cpu runs the Triton interpreter (a smoke test of "
                   "this script only: set TRITON_INTERPRET=1, and use --sets cpu --time-set cpu --no-compile)")
    args = p.parse_args(argv)
    args.types = [t for t in args.types.split(",") if t]
    args.backends = [b for b in args.backends.split(",") if b]
    args.sets = [s for s in args.sets.split(",") if s]
    args.check_dtypes = [DTYPES[d] for d in args.check_dtypes.split(",") if d]
    args.device = torch.device(args.device)
    if args.repeats < 1:
        p.error(f"--repeats {args.repeats}: at least 1 round is timed (1: ours once, the baselines once per shape)")
    for name, values, allowed in (("--types", args.types, KERNEL_TYPES), ("--backends", args.backends, BACKENDS),
                                  ("--sets", args.sets, SHAPE_SET_NAMES), ("--time-set", [args.time_set],
                                                                           SHAPE_SET_NAMES)):
        bad = [v for v in values if v not in allowed]
        if bad:
            p.error(f"{name} {','.join(bad)}: expected a comma-separated subset of {','.join(allowed)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device.type == "cuda" and not torch.cuda.is_available():
        print("check_starters_gpu: no CUDA device; run this on the GPU machine (or --device cpu to smoke-test "
              "the script through the Triton interpreter)", file=sys.stderr)
        return 2
    gpu = torch.cuda.get_device_name(args.device) if args.device.type == "cuda" else "CPU (Triton interpreter)"
    # The CPU smoke run has no GPU: it borrows the H200's entry so the table still has a ceiling column.
    spec = probe(args.device.index or 0).spec if args.device.type == "cuda" else load_spec("h200")
    args.ceilings = resolve_ceilings(args, spec, gpu)
    baselines = Baselines(use_compile=not args.no_compile)
    reports: list[Report] = []
    began = time.perf_counter()
    for backend in args.backends:
        for kernel_type in args.types:
            path = REPO / "kernels" / backend / f"{kernel_type}.py"
            if not path.is_file():
                print(f"[skip] {backend}/{kernel_type}: no {path.relative_to(REPO)}")
                continue
            print(f"[run ] {backend}/{kernel_type} ...", flush=True)
            r = run_one(kernel_type, backend, path, baselines, args)
            reports.append(r)
            status = r.error or (f"{len(r.failed_checks)} failed checks" if r.failed_checks else "ok")
            print(f"[done] {backend}/{kernel_type}: {status} ({r.seconds:.1f} s)")
            for c in r.failed_checks:
                print(f"       FAIL {c.shape_set} {c.shape} {c.dtype}: {c.message}")
            for t in r.timings:
                if t.error:
                    print(f"       TIME-ERROR {t.shape}: {t.error}")
                else:
                    print(f"       {t.shape}: {t.ours_us:.1f} us, {t.value:.1f} {t.metric} ({t.pct_of_ceiling:.1f}%), "
                          f"eager {_fmt(t.eager_us)} us, compile {_fmt(t.compile_us)} us, "
                          f"x{_fmt(t.speedup_vs_eager, '.2f')} / x{_fmt(t.speedup_vs_compile, '.2f')}")
    markdown = render_markdown(reports, args, gpu)
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {
        "version": 1,
        "gpu": gpu,
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "dtype": args.dtype,
        "warmup_ms": args.warmup,
        "rep_ms": args.rep,
        "repeats": args.repeats,
        "copy_gbps": args.copy_gbps,
        "peak_tflops": args.peak_tflops,
        "ceilings": args.ceilings,
        "seconds": time.perf_counter() - began,
        "reports": [{**asdict(r), "failed": len(r.failed_checks)} for r in reports],
    }
    (args.out / "check_starters.json").write_text(json.dumps(payload, indent=2))
    (args.out / "check_starters.md").write_text(markdown)
    print()
    print(markdown)
    print(f"wrote {args.out / 'check_starters.json'} and {args.out / 'check_starters.md'} "
          f"in {payload['seconds']:.0f} s")
    return 1 if any(r.error or r.failed_checks for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
