"""The five verification stages (DESIGN.md §6), as plain functions over one loaded candidate.

`VerifyRun` owns one candidate's verification: the pytest tests in stage_tests.py call
`run_stage(name)` and the worker reads `verdict()` afterwards. Every case follows one order:
inputs from a seed derived from the run's secret seed -> the candidate, under calls.guarded_call
-> the output copied on the current stream the way a caller would read it -> only then the
high-precision reference, computed from the inputs, never before the candidate returned and never
kept after the case (each case runs in its own function frame, so its tensors die with it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from autokernel_ci.compare import compare
from autokernel_ci.harness import calls, faults, guard
from autokernel_ci.harness.loader import Candidate, LoadFailure
from autokernel_ci.harness.results import STAGES, CheckFailure, StageResult, Status, Verdict
from autokernel_ci.specs import get_spec
from autokernel_ci.specs.base import CPU_SET, EDGE_SET, MODEL_SETS, ODD_SET, KernelSpec, Tolerance

# Private references (see guard.py): what the checks use cannot be swapped by the candidate.
_compare = compare
_same_values = calls._same_values
_guarded_call = calls.guarded_call
_perf_counter = time.perf_counter

DTYPE_NAMES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16,
               "float16": torch.float16, "fp32": torch.float32, "float32": torch.float32}


@dataclass(frozen=True)
class StagePlan:
    """Which shapes each stage visits, per device. Tunables, not logic."""

    sweep_sets: tuple[str, ...]  # shape sets for the sweep (edge runs in its own stage)
    stress_sets: tuple[str, ...]  # where numerical-stability families run (first shape of each set)
    determinism_runs: int = 3  # identical inputs, this many calls, bitwise-equal outputs
    noncontiguous_sets: tuple[str, ...] = (CPU_SET,)  # shapes whose inputs get strided variants
    floor_check: bool = False  # time the largest sweep case against the physical floor (GPU only)


PLANS = {
    # The Triton interpreter runs ~1e5-1e6 elements/s: small sets only (seconds per candidate).
    "cpu": StagePlan(sweep_sets=(CPU_SET,), stress_sets=(CPU_SET,)),
    "cuda": StagePlan(sweep_sets=(*MODEL_SETS, ODD_SET, CPU_SET), stress_sets=(ODD_SET,),
                      noncontiguous_sets=(CPU_SET, ODD_SET), floor_check=True),
}

# Padding added to each row of a "slice of a wider buffer" input: odd, so the row stride is not a
# multiple of 16 elements (kernels specialised on aligned strides must still be right).
ROW_PAD = 3
FLOOR_TIMING_CALLS = 5  # candidate calls timed for the below-physical-floor check in verify()
# Triton 3.6's CPU interpreter truncates fp32 -> bf16 instead of rounding to nearest (measured:
# 1 + 2^-8 + 2^-12 stores as 1.0; torch and the GPU give 1.0078125), so an honest kernel is off by up
# to one bf16 ulp (2^-7 relative) where the GPU is off by half. Under the interpreter only, bf16's
# rel_l2 bound is doubled; the elementwise bound (rtol 1.6e-2) already covers a full ulp.
INTERPRETER_BF16_REL_L2_FACTOR = 2.0

HARDENING_CHECKS = (
    "forbidden_op", "output_type", "aliasing", "input_mutated", "poisoned_output", "nan_inf", "caching",
    "ignored_argument", "kernel_ran", "nondeterministic", "side_stream", "tampering", "below_physical_floor",
)


def derive_seed(seed: int, *parts: Any) -> int:
    digest = hashlib.blake2b(":".join(str(p) for p in (seed, *parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def dtype_from_name(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    try:
        return DTYPE_NAMES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}: expected one of {', '.join(DTYPE_NAMES)}") from None


class _Reject(Exception):
    """A check failed: carries the CheckFailure up to the stage runner."""

    def __init__(self, failure: CheckFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


@dataclass
class VerifyRun:
    candidate: Candidate
    device: str = "cpu"
    shape_sets: Sequence[str] | None = None
    extra_shapes: Sequence[dict] = ()
    dtypes: Sequence[torch.dtype | str] | None = None
    seed_source: Callable[[], int] | None = None
    progress: Callable[[str], None] | None = None  # told the stage, shape and dtype as they change
    fail_fast: bool = True  # later stages are NOT_RUN after a failure (the loop wants speed)
    results: dict[str, StageResult] = field(default_factory=dict)
    hardening: dict[str, str] = field(default_factory=dict)
    dirty: bool = False  # the process must not run another candidate (tampering, CUDA error)
    _seed: int | None = None
    _started: float = field(default_factory=time.perf_counter)
    _stage_name: str = "?"  # the stage running now, for progress reports
    _last_report: str | None = None

    def __post_init__(self) -> None:
        self.spec: KernelSpec = get_spec(self.candidate.kernel.kernel_type)
        self.torch_device = torch.device(self.device)
        self.plan = PLANS["cuda" if self.torch_device.type == "cuda" else "cpu"]
        wanted = [dtype_from_name(d) for d in self.dtypes] if self.dtypes else list(self.spec.dtypes)
        unknown = [d for d in wanted if d not in self.spec.tolerances]
        if unknown:
            raise ValueError(f"{self.spec.name} has no tolerance for {unknown}; it runs in {list(self.spec.dtypes)}")
        self.run_dtypes: list[torch.dtype] = wanted
        if self.shape_sets is not None:
            missing = [s for s in self.shape_sets if s not in self.spec.shape_sets]
            if missing:
                raise ValueError(f"{self.spec.name} has no shape set {missing}; known: {sorted(self.spec.shape_sets)}")
        for check in HARDENING_CHECKS:
            self.hardening.setdefault(check, "not run")

    # -- seed ----------------------------------------------------------------------------------
    @property
    def seed(self) -> int:
        """Read on first use, i.e. after the candidate was imported (see loader.py)."""
        if self._seed is None:
            self._seed = int(self.seed_source()) if self.seed_source else int.from_bytes(guard._urandom(8), "little")
        return self._seed

    def _gen(self, *parts: Any) -> torch.Generator:
        return torch.Generator(device=self.torch_device).manual_seed(derive_seed(self.seed, *parts))

    # -- stage driver ----------------------------------------------------------------------------
    def run_stage(self, name: str) -> StageResult:
        if name not in STAGES:
            raise ValueError(f"unknown stage {name!r}: expected one of {', '.join(STAGES)}")
        if name in self.results:
            return self.results[name]
        failed = next((r for r in self.results.values() if r.status not in (Status.PASS, Status.NOT_RUN)), None)
        if failed is not None and (self.fail_fast or self.dirty):
            result = StageResult(name, Status.NOT_RUN, reason=f"not run: stage {failed.name} failed")
            self.results[name] = result
            return result
        t0 = _perf_counter()
        counter = [0]
        self._stage_name = name
        self._report(f"stage {name}")
        try:
            getattr(self, f"_stage_{name}")(counter)
            result = StageResult(name, Status.PASS, cases=counter[0])
        except _Reject as rej:
            f = rej.failure
            if f.check in HARDENING_CHECKS:
                self.hardening[f.check] = f"fail: {f.message}"
            result = StageResult(name, Status.FAIL, reason=_reason(f), failures=[f], cases=counter[0])
        except BaseException as exc:  # noqa: BLE001 - whatever the candidate raised is the verdict
            if isinstance(exc, KeyboardInterrupt):
                raise
            status = faults.classify(exc)
            if self.torch_device.type == "cuda" and (status is Status.OOM or faults.poisons_cuda_context(exc)):
                self.dirty = True
            result = StageResult(name, status, reason=faults.describe(exc), cases=counter[0])
        changes = guard.find_tampering(self.candidate.snapshot)
        if changes:
            self.dirty = True
            text = "tampering: " + "; ".join(changes)
            self.hardening["tampering"] = f"fail: {text}"
            result = StageResult(name, Status.FAIL, reason=text, cases=counter[0],
                                 failures=[CheckFailure(check="tampering", message=text)])
        result.duration_s = round(_perf_counter() - t0, 4)
        self.results[name] = result
        if result.status is Status.PASS:
            for check, state in self.hardening.items():
                if state == "not run" and check in self._checks_of(name):
                    self.hardening[check] = "pass"
        return result

    def run_all(self) -> Verdict:
        for name in STAGES:
            self.run_stage(name)
        return self.verdict()

    def _checks_of(self, stage: str) -> tuple[str, ...]:
        per_call = ("forbidden_op", "output_type", "aliasing", "input_mutated", "poisoned_output", "nan_inf",
                    "tampering") + (("side_stream",) if self.torch_device.type == "cuda" else ())
        extra = {"smoke": ("caching", "ignored_argument", "kernel_ran"), "determinism": ("nondeterministic",),
                 "shape_sweep": ("below_physical_floor",) if self.plan.floor_check else ()}
        return per_call + extra.get(stage, ())

    def verdict(self, kernel_label: str | None = None) -> Verdict:
        stages = [self.results.get(n) or StageResult(n, Status.NOT_RUN, reason="not run") for n in STAGES]
        bad = next((s for s in stages if s.status is not Status.PASS), None)
        if self.torch_device.type != "cuda":
            self.hardening["side_stream"] = "skipped: no streams on CPU"
            if self.hardening.get("below_physical_floor") == "not run":
                self.hardening["below_physical_floor"] = ("skipped: CPU timings of interpreted kernels have no "
                                                          "physical floor")
        return Verdict(
            kernel=kernel_label or str(self.candidate.path), kernel_type=self.spec.name,
            backend=self.candidate.kernel.backend, source_hash=self.candidate.kernel.source_hash,
            device=self.device, status=bad.status if bad else Status.PASS,
            reason=f"{bad.name}: {bad.reason}" if bad else "", stages=stages, hardening=dict(self.hardening),
            duration_s=round(_perf_counter() - self._started, 3))

    # -- helpers ---------------------------------------------------------------------------------
    def _expected_dtype(self, inputs: Sequence[Any]) -> torch.dtype:
        if self.spec.output_dtype is not None:
            return self.spec.output_dtype
        return next(t.dtype for _, t in calls.tensors(inputs))

    def _report(self, where: str) -> None:
        if self.progress is not None and where != self._last_report:
            self._last_report = where
            self.progress(where)

    def _call(self, inputs: Sequence[Any], shape: dict, dtype: torch.dtype, poison: float | None = calls.POISON_NAN):
        if self.progress is not None:  # the string is built only when someone listens
            self._report(f"stage {self._stage_name}, shape {self.spec.describe_shape(shape)}, "
                         f"{str(dtype).removeprefix('torch.')}")
        result = _guarded_call(self.candidate.fn, inputs, allowed_aten=self.spec.allowed_aten,
                               arg_names=self.spec.arg_names, poison=poison)
        if result.failure is not None:
            raise _Reject(_where(result.failure, shape, dtype))
        # `seen` was copied on the current stream right after the call, with no extra synchronisation:
        # what a caller reads. A kernel left running on a side stream shows up as poison in it.
        return result.out, result.seen

    def _tolerance(self, dtype: torch.dtype, stress_case: str | None = None) -> Tolerance:
        tol = self.spec.tolerance(dtype, stress_case)  # a stress case may carry its own bound (specs/base.py)
        if dtype == torch.bfloat16 and calls.interpreting() and self.torch_device.type == "cpu":
            tol = dataclasses.replace(tol, rel_l2=tol.rel_l2 * INTERPRETER_BF16_REL_L2_FACTOR)
        return tol

    def _check_output(self, seen: torch.Tensor, out: torch.Tensor, inputs: Sequence[Any], shape: dict,
                      dtype: torch.dtype, ref: torch.Tensor, stress_case: str | None = None) -> None:
        tol = self._tolerance(dtype, stress_case)
        failure = _compare(seen, ref, tol, expect_dtype=self._expected_dtype(inputs))
        if failure is None:
            return
        if self.torch_device.type == "cuda" and failure.check not in ("output_shape", "output_dtype", "output_type"):
            torch.cuda.synchronize()
            if _compare(out, ref, tol, expect_dtype=self._expected_dtype(inputs)) is None:
                failure = CheckFailure(
                    check="side_stream", message="the output was complete only after a device-wide synchronize: "
                    "the kernel ran on another stream without ordering it before the caller's current stream")
        if failure.check == "nan_inf":
            failure = self._diagnose_unwritten(failure, inputs, shape, dtype, ref)
        raise _Reject(_where(failure, shape, dtype))

    def _diagnose_unwritten(self, failure: CheckFailure, inputs, shape, dtype, ref) -> CheckFailure:
        """NaN where the reference is finite: computed, or never written? Re-run with zeroed memory."""
        try:
            _, seen = self._call(inputs, shape, dtype, poison=0.0)
        except Exception:  # noqa: BLE001 - the diagnosis is best effort; the case already failed
            return failure
        if bool(torch.isfinite(seen.double()).all()):
            return CheckFailure(
                check="poisoned_output", message=f"{failure.message} - they are memory the kernel never wrote (the "
                "harness fills fresh allocations with NaN; with zero-filled memory the NaN disappeared): every "
                "output element must be written", first_bad_index=failure.first_bad_index)
        return failure

    def _case(self, make, shape: dict, dtype: torch.dtype, gen: torch.Generator,
              transform: Callable[[tuple], tuple] | None = None, stress_case: str | None = None) -> None:
        inputs = make(shape, dtype, self.torch_device, gen)
        if transform is not None:
            inputs = transform(inputs)
        out, seen = self._call(inputs, shape, dtype)
        ref = self.spec.run_reference(inputs)  # after the candidate returned
        self._check_output(seen, out, inputs, shape, dtype, ref, stress_case)

    def _shapes(self, *set_names: str) -> list[dict]:
        return self.spec.shapes(*[n for n in set_names if n in self.spec.shape_sets])

    # -- the five stages -------------------------------------------------------------------------
    def _stage_smoke(self, counter: list[int]) -> None:
        shape, dtype = self._shapes(CPU_SET)[0], self.run_dtypes[0]
        make = self.spec.make_inputs
        dev = self.torch_device
        inputs_a = make(shape, dtype, dev, self._gen("smoke", 0))
        inputs_b = make(shape, dtype, dev, self._gen("smoke", 1))
        cand = self.candidate
        with calls.launch_tracker(cand.module_name, cand.kernel_names, dev) as launches:
            out_a, seen_a = self._call(inputs_a, shape, dtype)
        out_b, seen_b = self._call(inputs_b, shape, dtype)
        probes = []  # (arg index, inputs with that argument redrawn, output)
        for i, t in calls.tensors(inputs_a):
            alt = make(shape, dtype, dev, self._gen("smoke", 2 + i))[i]
            if _same_values(alt, t):
                continue  # e.g. rotary tables depend on the shape only
            changed = list(inputs_a)
            changed[i] = alt
            probes.append((i, tuple(changed), self._call(changed, shape, dtype)[1]))
        counter[0] += 2 + len(probes)
        # Every call is done: only now the references exist.
        ref_a = self.spec.run_reference(inputs_a)
        tol = self._tolerance(dtype)
        first = _compare(seen_a, ref_a, tol, expect_dtype=self._expected_dtype(inputs_a))
        if first is not None and first.check == "allclose":
            for i, changed, seen_c in probes:
                if _same_values(seen_c, seen_a) and _compare(self.spec.run_reference(changed), ref_a, tol) is not None:
                    raise _Reject(_where(CheckFailure(
                        check="ignored_argument", message=f"the output did not change when {self.spec.arg_names[i]!r} "
                        "changed (the reference did): the kernel ignores that argument"), shape, dtype))
        self._check_output(seen_a, out_a, inputs_a, shape, dtype, ref_a)
        ref_b = self.spec.run_reference(inputs_b)
        if _same_values(seen_b, seen_a) and _compare(ref_b, ref_a, tol) is not None:
            raise _Reject(_where(CheckFailure(
                check="caching", message="two different inputs gave bitwise-identical outputs: the kernel returns a "
                "stored result instead of computing it"), shape, dtype))
        self._check_output(seen_b, out_b, inputs_b, shape, dtype, ref_b)
        for i, changed, seen_c in probes:
            ref_c = self.spec.run_reference(changed)
            if _same_values(seen_c, seen_a) and _compare(ref_c, ref_a, tol) is not None:
                raise _Reject(_where(CheckFailure(
                    check="ignored_argument", message=f"the output did not change when {self.spec.arg_names[i]!r} "
                    "changed (the reference did): the kernel ignores that argument"), shape, dtype))
            self._check_output(seen_c, seen_c, changed, shape, dtype, ref_c)
        if not launches:
            kind = "torch.profiler kernel events" if dev.type == "cuda" else "Triton interpreter launches"
            raise _Reject(_where(CheckFailure(
                check="kernel_ran", message=f"no launch of the candidate's own kernels "
                f"({', '.join(cand.kernel_names) or 'none defined'}) was seen in {kind}: the result was computed "
                "some other way"), shape, dtype))
        self.hardening["kernel_ran"] = f"pass ({', '.join(dict.fromkeys(launches))})"

    def _sweep_shapes(self) -> list[dict]:
        sets = self.shape_sets if self.shape_sets is not None else self.plan.sweep_sets
        shapes = self._shapes(*[s for s in sets if s != EDGE_SET])
        return shapes + [dict(s) for s in self.extra_shapes if dict(s) not in shapes]

    def _stage_shape_sweep(self, counter: list[int]) -> None:
        shapes = self._sweep_shapes()
        for dtype in self.run_dtypes:
            for n, shape in enumerate(shapes):
                self._case(self.spec.make_inputs, shape, dtype, self._gen("sweep", n, dtype))
                counter[0] += 1
        if self.plan.floor_check and shapes:
            self._floor_check(max(shapes, key=lambda s: self.spec.bytes_moved(s, self.run_dtypes[0])))

    def _floor_check(self, shape: dict) -> None:
        from autokernel_ci.harness import roofline, timing

        dtype = self.run_dtypes[0]
        inputs = self.spec.make_inputs(shape, dtype, self.torch_device, self._gen("floor"))
        t = timing.time_calls({"candidate": lambda: self.candidate.fn(*inputs)}, self.torch_device,
                              samples=FLOOR_TIMING_CALLS, warmup=1)["candidate"]
        problem = roofline.below_floor(self.spec, shape, dtype, t.median_us)
        if problem:
            raise _Reject(_where(CheckFailure(check="below_physical_floor", message=problem), shape, dtype))
        self.hardening["below_physical_floor"] = "pass"

    def _stage_numerical_stability(self, counter: list[int]) -> None:
        shapes = [self._shapes(s)[0] for s in self.plan.stress_sets if s in self.spec.shape_sets]
        for case in self.spec.stress_cases:
            for dtype in self.run_dtypes:
                for n, shape in enumerate(shapes):
                    self._case(case.make_inputs, shape, dtype, self._gen("stress", case.name, n, dtype),
                               stress_case=case.name)
                    counter[0] += 1

    def _stage_determinism(self, counter: list[int]) -> None:
        shapes = [self._shapes(CPU_SET)[0]] + [dict(s) for s in self.extra_shapes[:1]]
        if self.torch_device.type == "cuda":
            shapes.append(self._shapes(ODD_SET)[0])
        for dtype in self.run_dtypes:
            for n, shape in enumerate(shapes):
                self._repeat_case(shape, dtype, self._gen("determinism", n, dtype))
                counter[0] += 1

    def _repeat_case(self, shape: dict, dtype: torch.dtype, gen: torch.Generator) -> None:
        inputs = self.spec.make_inputs(shape, dtype, self.torch_device, gen)
        runs = [self._call(inputs, shape, dtype) for _ in range(self.plan.determinism_runs)]
        ref = self.spec.run_reference(inputs)
        self._check_output(runs[0][1], runs[0][0], inputs, shape, dtype, ref)
        for k, (_, seen) in enumerate(runs[1:], start=2):
            if self.spec.deterministic:
                if not _same_values(seen, runs[0][1]):
                    diff = (seen.double() - runs[0][1].double()).abs()
                    idx = [int(i) for i in diff.nan_to_num(1.0).nonzero()[0]] if diff.dim() else []
                    raise _Reject(_where(CheckFailure(
                        check="nondeterministic", message=f"run {k} of {self.plan.determinism_runs} on the same inputs "
                        f"differs from run 1 (max |diff| {float(diff.nan_to_num(0).max()):.3g}); this kernel type "
                        "must be bitwise reproducible", first_bad_index=idx), shape, dtype))
            else:
                self._check_output(seen, seen, inputs, shape, dtype, ref)

    def _stage_edge_cases(self, counter: list[int]) -> None:
        for dtype in self.run_dtypes:
            for n, shape in enumerate(self._shapes(EDGE_SET)):
                self._case(self.spec.make_inputs, shape, dtype, self._gen("edge", n, dtype))
                counter[0] += 1
        for n, shape in enumerate(self._shapes(*self.plan.noncontiguous_sets)):
            for pos in self.spec.noncontiguous_args:
                for variant in ("row_padded", "transposed", "heads_permuted"):
                    transform = _strided(pos, variant)
                    for dtype in self.run_dtypes[:1]:
                        gen = self._gen("noncontig", n, pos, variant, dtype)
                        try:
                            self._case(self.spec.make_inputs, {**shape}, dtype, gen, transform)
                        except _NotApplicable:
                            continue
                        except _Reject as rej:
                            rej.failure.message = f"[{self.spec.arg_names[pos]} {variant}] {rej.failure.message}"
                            raise
                        counter[0] += 1


class _NotApplicable(Exception):
    pass


def _strided(pos: int, variant: str) -> Callable[[tuple], tuple]:
    """Replace argument `pos` by the same values laid out as a realistic strided view."""

    def transform(inputs: tuple) -> tuple:
        t = inputs[pos]
        if not isinstance(t, torch.Tensor) or t.dim() < 1:
            raise _NotApplicable
        if variant == "row_padded":  # a slice of a wider buffer (e.g. q out of a fused qkv projection)
            if t.dim() < 2:
                raise _NotApplicable
            fill = float("nan") if t.is_floating_point() else 0
            buf = torch.full((*t.shape[:-1], t.shape[-1] + ROW_PAD), fill, dtype=t.dtype, device=t.device)
            buf[..., : t.shape[-1]].copy_(t)
            view = buf[..., : t.shape[-1]]
        elif variant == "transposed":  # a transposed projection / nn.Linear weight
            if t.dim() < 2 or t.shape[-1] == 1 or t.shape[-2] == 1:
                raise _NotApplicable
            view = t.transpose(-1, -2).contiguous().transpose(-1, -2)
        else:  # [B,S,H,D] projection viewed as [B,H,S,D]
            if t.dim() != 4 or t.shape[1] == 1 or t.shape[2] == 1:
                raise _NotApplicable
            view = t.transpose(1, 2).contiguous().transpose(1, 2)
        return (*inputs[:pos], view, *inputs[pos + 1:])

    return transform


def _where(failure: CheckFailure, shape: dict, dtype: torch.dtype) -> CheckFailure:
    failure.shape = failure.shape or dict(shape)
    failure.dtype = failure.dtype or str(dtype).removeprefix("torch.")
    return failure


def _reason(f: CheckFailure) -> str:
    parts = [f"{f.check}: {f.message}"]
    if f.shape is not None:
        parts.append(f"shape={f.shape}")
    if f.dtype:
        parts.append(f"dtype={f.dtype}")
    for label, value in (("max_abs_err", f.max_abs_err), ("max_rel_err", f.max_rel_err), ("rel_l2", f.rel_l2)):
        if value is not None and math.isfinite(value):
            parts.append(f"{label}={value:.3g}")
    if f.first_bad_index:
        parts.append(f"first_bad_index={f.first_bad_index}")
    return " ".join(parts)


def iter_stage_names() -> Iterator[str]:
    yield from STAGES


class LoadFailedRun:
    """Stands in for a VerifyRun when the candidate could not be loaded: smoke carries the failure."""

    def __init__(self, failure, path: str, device: str) -> None:
        self.failure, self.path, self.device = failure, path, device
        self.dirty = failure.check == "tampering"
        self.results: dict[str, StageResult] = {}

    def run_stage(self, name: str) -> StageResult:
        if name == STAGES[0]:
            f = CheckFailure(check=self.failure.check, message=self.failure.reason)
            result = StageResult(name, self.failure.status, reason=f"{f.check}: {f.message}", failures=[f])
        else:
            result = StageResult(name, Status.NOT_RUN, reason=f"not run: the kernel could not be loaded "
                                 f"({self.failure.status})")
        self.results[name] = result
        return result

    def verdict(self, kernel_label: str | None = None) -> Verdict:
        return failed_verdict(self.failure, kernel_label or self.path, self.device)


def failed_verdict(failure: LoadFailure, kernel_label: str, device: str, duration_s: float = 0.0) -> Verdict:
    """The verdict of a candidate that never ran its stages (contract, import, crash before smoke)."""
    kf = failure.kernel
    stages = [StageResult(STAGES[0], failure.status, reason=f"{failure.check}: {failure.reason}",
                          failures=[CheckFailure(check=failure.check, message=failure.reason)])]
    stages += [StageResult(n, Status.NOT_RUN, reason="not run") for n in STAGES[1:]]
    hardening = {"tampering": f"fail: {failure.reason}"} if failure.check == "tampering" else {}
    return Verdict(kernel=kernel_label, kernel_type=kf.kernel_type if kf else "", backend=kf.backend if kf else "",
                   source_hash=kf.source_hash if kf else "", device=device, status=failure.status,
                   reason=f"{failure.check}: {failure.reason}", stages=stages, hardening=hardening,
                   duration_s=duration_s)
