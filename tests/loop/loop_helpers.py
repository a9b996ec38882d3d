"""Helpers for loop tests: small CPU plans the Triton interpreter runs in seconds."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from autokernel_ci.plan import Plan, PlanOp
from autokernel_ci.specs import get_spec

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "agents"))  # the scripted LLM server

# op id -> (kernel type, share); shapes are each spec's first "cpu" shape, fp32 for exact CPU references
DEFAULT_OPS = (("rmsnorm-0", "rmsnorm", 0.3), ("softmax-0", "softmax", 0.2))


def make_plan(ops=DEFAULT_OPS, dtype: str = "fp32") -> Plan:
    plan_ops = []
    for op_id, kind, share in ops:
        shape = dict(get_spec(kind).shape_sets["cpu"][0])
        plan_ops.append(PlanOp(id=op_id, kernel_type=kind, name=kind, shapes=[shape], dtype=dtype, calls=1,
                               time_us=100.0 * share, share=share, bound="memory", floor_us=None,
                               amdahl_gain=1.0 / (1.0 - share * 0.5)))
    return Plan(model="model.py:build", dtype=dtype, device="cpu", ops=plan_ops)


def read_journal(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines() if line.strip()]


def never_better(candidate, best):
    """A LoopSettings.decide that keeps nothing (so every screened candidate stays unverified)."""
    from autokernel_ci.harness import Decision

    return Decision(False, best.median_us / candidate.median_us, 0.0, "slower: the test's decide keeps nothing")


def always_better(candidate, best):
    """A LoopSettings.decide that keeps everything (so every screened candidate is verified)."""
    from autokernel_ci.harness import Decision

    return Decision(True, best.median_us / candidate.median_us, 0.0, "faster: the test's decide keeps everything")


def hundred_times_faster(candidate, best):
    """A LoopSettings.decide that keeps only a 100x gain: none between CONFIG points of one starter on the CPU, so
    only a best recorded far slower than it runs (a stale timing) can be beaten."""
    from autokernel_ci.harness import Decision

    speedup = best.median_us / candidate.median_us
    return Decision(speedup > 100.0, speedup, 0.0, f"{speedup:.3g}x: the test's decide keeps only a 100x gain")
