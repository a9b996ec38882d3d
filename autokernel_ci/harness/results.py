"""Results of verification and benchmarking, as data (JSON round-trip), shared by the harness,
the loop, the reports and the CLI. One renderer prints them (autokernel_ci.render)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    PASS = "pass"
    FAIL = "fail"  # ran, but wrong or caught cheating: `reason` says which check
    CRASH = "crash"  # raised, segfaulted, illegal address: the worker was replaced
    TIMEOUT = "timeout"  # killed (process group) after the time limit
    OOM = "oom"
    COMPILE_ERROR = "compile_error"
    INVALID = "invalid"  # breaks the kernel-file contract or the static policy; never ran
    NOT_RUN = "not_run"  # an earlier stage failed
    UNVERIFIED = "unverified"  # benchmarked first and no faster than the best, so never verified (the loop's screen)

    def __str__(self) -> str:
        return self.value


@dataclass
class CheckFailure:
    """Where and how a check failed: enough to reproduce it."""

    check: str  # e.g. "allclose", "poisoned_output", "input_mutated", "aliasing", "caching", ...
    message: str
    shape: dict[str, Any] | None = None
    dtype: str | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    rel_l2: float | None = None
    first_bad_index: list[int] | None = None


@dataclass
class StageResult:
    name: str  # smoke | shape_sweep | numerical_stability | determinism | edge_cases
    status: Status
    reason: str = ""
    failures: list[CheckFailure] = field(default_factory=list)
    cases: int = 0  # (shape, dtype, input family) combinations checked
    duration_s: float = 0.0


STAGES = ("smoke", "shape_sweep", "numerical_stability", "determinism", "edge_cases")


@dataclass
class Verdict:
    kernel: str  # path or "<source>"
    kernel_type: str
    backend: str
    source_hash: str
    device: str
    status: Status
    reason: str = ""
    stages: list[StageResult] = field(default_factory=list)
    hardening: dict[str, str] = field(default_factory=dict)  # check name -> "pass" / failure text
    duration_s: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status is Status.PASS

    def to_dict(self) -> dict[str, Any]:
        return _plain(asdict(self))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Verdict:
        stages = [
            StageResult(**{**s, "status": Status(s["status"]),
                           "failures": [CheckFailure(**f) for f in s.get("failures", [])]})
            for s in d.get("stages", [])
        ]
        return cls(**{**d, "status": Status(d["status"]), "stages": stages})


@dataclass
class Timing:
    median_us: float
    p20_us: float
    p80_us: float
    samples: int

    @property
    def spread_us(self) -> float:
        return self.p80_us - self.p20_us


@dataclass
class ShapeBench:
    shape: dict[str, Any]
    dtype: str
    candidate: Timing
    eager: Timing | None = None
    compiled: Timing | None = None
    metric: str = "GB/s"  # GB/s or TFLOP/s (the spec's primary metric)
    value: float = 0.0  # candidate's GB/s or TFLOP/s
    pct_of_ceiling: float | None = None
    floor_us: float | None = None  # bytes/bandwidth or flops/peak, whichever is larger
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None


@dataclass
class BenchResult:
    kernel: str
    kernel_type: str
    backend: str
    source_hash: str
    device: str
    gpu: str
    rows: list[ShapeBench] = field(default_factory=list)
    ceiling_source: str = ""  # "gpu_specs:<key>" or "calibrated"
    note: str = ""  # e.g. CPU timings of interpreted kernels mean nothing
    checks: dict[str, str] = field(default_factory=dict)  # e.g. below_physical_floor -> "pass" / "fail: ..."
    # harness.confirm.Confirmation.to_dict(): a keep re-timed in turn with the best (None: not asked, or not a keep)
    confirmation: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return _plain(asdict(self))

    def total(self) -> Timing:
        """The candidate over all rows: times add up (an op runs at every one of its shapes), so does the spread."""
        cand = [r.candidate for r in self.rows]
        return Timing(sum(t.median_us for t in cand), sum(t.p20_us for t in cand), sum(t.p80_us for t in cand),
                      min((t.samples for t in cand), default=0))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BenchResult:
        def timing(t):
            return Timing(**t) if t else None

        rows = [
            ShapeBench(**{**r, "candidate": timing(r["candidate"]), "eager": timing(r.get("eager")),
                          "compiled": timing(r.get("compiled"))})
            for r in d.get("rows", [])
        ]
        return cls(**{**d, "rows": rows})


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
