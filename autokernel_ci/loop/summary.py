"""summary.json (docs/loop.md): the run's best-so-far results, derived from the journal alone.

Being a pure function of (plan, journal records, settings), it is rebuilt identically after a
`--resume`, and publish can trust it without reading the journal.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from autokernel_ci.loop.journal import BEST_DIR, KERNELS_DIR, is_experiment
from autokernel_ci.plan import Plan, PlanOp

SUMMARY_VERSION = 1


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _ratio(num: float | None, den: float | None) -> float | None:
    return round(num / den, 4) if num and den else None


def op_summary(op: PlanOp, records: list[dict[str, Any]], backend: str) -> dict[str, Any]:
    mine = [r for r in records if r["op_id"] == op.id]
    baseline = next((r for r in mine if r["n"] == 0), None)
    kept = [r for r in mine if r["status"] == "kept"]
    best = kept[-1] if kept else None  # a version is kept only when it beats the previous best
    experiments = [r for r in mine if is_experiment(r)]
    starter_us = baseline.get("median_us") if baseline and baseline["status"] == "kept" else None
    eager_us = baseline.get("eager_us") if baseline else None
    compile_us = baseline.get("compile_us") if baseline else None
    best_us = best.get("median_us") if best else None
    if best is None:
        status = "failed" if baseline else "pending"
    else:
        status = "improved" if best["n"] >= 1 else "unchanged"
    return {
        "op_id": op.id,
        "kernel_type": op.kernel_type,
        "backend": backend,
        "name": op.name,
        "shapes": op.shapes,
        "dtype": op.dtype,
        "share": op.share,
        "status": status,
        "reason": (baseline or {}).get("reason", "") if status == "failed" else "",
        "best_file": f"{BEST_DIR}/{op.id}.py" if best else None,
        "best_version": f"{KERNELS_DIR}/{op.id}/{best['n']:04d}_{best['source_hash']}.py" if best else None,
        "best_n": best["n"] if best else None,
        "source_hash": best["source_hash"] if best else None,
        "idea": best.get("idea") if best else None,
        "starter_us": starter_us,
        "best_us": best_us,
        "p20_us": best.get("p20_us") if best else None,
        "p80_us": best.get("p80_us") if best else None,
        "eager_us": eager_us,
        "compile_us": compile_us,
        "speedup_vs_starter": _ratio(starter_us, best_us),
        "speedup_vs_eager": _ratio(eager_us, best_us),
        "speedup_vs_compile": _ratio(compile_us, best_us),
        "pct_of_ceiling": best.get("pct_of_ceiling") if best else None,
        "floor_us": best.get("floor_us") if best else None,
        "metric": best.get("metric") if best else None,
        "value": best.get("value") if best else None,
        "stages": best.get("stages", {}) if best else (baseline or {}).get("stages", {}),
        "experiments": len(experiments),
        "kept": sum(1 for r in experiments if r["status"] == "kept"),
        "usd": round(sum(r.get("usd", 0.0) for r in mine), 6),
    }


def end_to_end_estimate(ops: list[dict[str, Any]]) -> float | None:
    """Amdahl over the plan's shares, which are shares of the model as it runs today (eager): each op
    whose best kernel beats eager shrinks by that speedup; the others stay as they are (publish leaves
    them out). Against the starter instead, an H200 run whose RMSNorm was 11.9x eager but 1.0x its
    starter estimated 1.003x while the patched model measured 1.17x."""
    saved = 0.0
    for o in ops:
        speedup = o.get("speedup_vs_eager")
        if speedup and speedup > 1.0:
            saved += o["share"] * (1.0 - 1.0 / speedup)
    return round(1.0 / (1.0 - saved), 4) if saved < 1.0 else None


def build_summary(plan: Plan, records: list[dict[str, Any]], settings: dict[str, Any], *, elapsed_s: float,
                  stopped: str | None, finished: bool, backend: str = "triton") -> dict[str, Any]:
    ops = [op_summary(op, records, backend) for op in plan.targets()]
    experiments = [r for r in records if is_experiment(r)]
    return {
        "version": SUMMARY_VERSION,
        "updated": now_iso(),
        "started": settings.get("started"),
        "gpu": settings.get("gpu") or plan.gpu,
        "device": settings.get("device"),
        "agent": settings.get("agent"),
        "llm_model": settings.get("llm_model"),
        "shard": settings.get("shard"),
        "budget": settings.get("budget"),
        "experiments": len(experiments),
        "kept": sum(1 for r in experiments if r["status"] == "kept"),
        "elapsed_s": round(elapsed_s, 2),
        "usd": round(sum(r.get("usd", 0.0) for r in records), 6),
        "stopped": stopped,
        "finished": finished,
        "end_to_end_estimate": end_to_end_estimate(ops),
        "ops": {o["op_id"]: o for o in ops},
    }
