"""The plan artifact (docs/artifacts.md §1): what `profile` writes and `optimize` reads."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# The dtype names a plan, the command line and a kernel file's KNOB_SCOPE use (torch-free: cli.py reads them).
DTYPE_NAMES = ("bf16", "fp16", "fp32")

PLAN_VERSION = 1


class PlanError(ValueError):
    pass


@dataclass
class PlanOp:
    id: str  # "<kernel_type>-<n>", stable across stages
    kernel_type: str  # one of the nine, or "other"
    name: str
    shapes: list[dict[str, Any]]
    dtype: str  # "bf16" | "fp16" | "fp32"
    calls: int
    time_us: float
    share: float  # of the profiled model time, 0..1
    bound: str  # "memory" | "compute" | "unknown"
    floor_us: float | None
    amdahl_gain: float  # end-to-end speedup if this op ran at its floor
    modules: list[str] = field(default_factory=list)

    @property
    def optimisable(self) -> bool:
        return self.kernel_type != "other"


@dataclass
class Plan:
    model: str
    dtype: str
    device: str
    ops: list[PlanOp]
    inputs: str | None = None
    gpu: dict[str, Any] = field(default_factory=dict)
    model_time_us: float = 0.0
    profiled_time_us: float = 0.0
    version: int = PLAN_VERSION

    def targets(self) -> list[PlanOp]:
        """Ops of the nine types, largest Amdahl gain first."""
        return sorted((o for o in self.ops if o.optimisable), key=lambda o: o.amdahl_gain, reverse=True)

    def op(self, op_id: str) -> PlanOp:
        for o in self.ops:
            if o.id == op_id:
                return o
        raise KeyError(f"plan has no op {op_id!r}; ops: {', '.join(o.id for o in self.ops)}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "plan") -> Plan:
        if d.get("version") != PLAN_VERSION:
            raise PlanError(f"{where}: plan version {d.get('version')!r} is not {PLAN_VERSION}; "
                            "re-run `autokernel-ci profile` with this version")
        try:
            ops = [PlanOp(**o) for o in d["ops"]]
            return cls(**{**d, "ops": ops})
        except (KeyError, TypeError) as exc:
            raise PlanError(f"{where}: malformed plan ({exc}); re-run `autokernel-ci profile`") from exc

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        p = Path(path)
        try:
            data = json.loads(p.read_text())
        except FileNotFoundError:
            raise PlanError(f"plan file {p} does not exist; create it with `autokernel-ci profile --json {p}`") \
                from None
        except json.JSONDecodeError as exc:
            raise PlanError(f"plan file {p} is not JSON ({exc})") from exc
        return cls.from_dict(data, str(p))
