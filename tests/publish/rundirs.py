"""Write real run directories (docs/artifacts.md §2) on disk for the publish and action tests.

Test data, not a mock: the same files the loop writes (settings.json with the plan, journal.jsonl,
results.tsv, kernels/<op>/<n>_<hash>.py, best/<op>.py, summary.json), with honest Triton kernel
files (tests/publish/data/) and timings chosen by the test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autokernel_ci.kernelfile import load

DATA = Path(__file__).resolve().parent / "data"
KERNEL_FILES = {"rmsnorm": DATA / "rmsnorm_kernel.py", "softmax": DATA / "softmax_kernel.py"}
STAGES_PASS = {s: "pass" for s in ("smoke", "shape_sweep", "numerical_stability", "determinism", "edge_cases")}
SHAPES = {"rmsnorm": [{"M": 16, "N": 256}], "softmax": [{"M": 16, "N": 128}]}


def plan_op(op_id: str, kernel_type: str, share: float, modules: list[str] | None = None) -> dict[str, Any]:
    return {"id": op_id, "kernel_type": kernel_type, "name": f"aten::{kernel_type}", "shapes": SHAPES[kernel_type],
            "dtype": "fp32", "calls": 4, "time_us": 100.0 * share, "share": share, "bound": "memory",
            "floor_us": 5.0, "amdahl_gain": 1.0 + share / 2, "modules": modules or []}


def make_run_dir(path: Path, ops: list[dict[str, Any]], *, gpu: str = "NVIDIA H100 80GB HBM3",
                 shard: str | None = None, speedups: dict[str, list[float]] | None = None,
                 complete: bool = True, torn_tail: bool = False, eager_us: float = 100.0,
                 end_to_end: dict[str, Any] | None = None, idea_text: str = "BLOCK={block}") -> Path:
    """One run directory. `speedups[op_id]` lists the speedup over eager of each kept version after
    the starter (the starter runs at 0.8x eager); each kept version is followed by a reverted one."""
    path.mkdir(parents=True)
    plan = {"version": 1, "model": "model.py:build_model", "inputs": None, "dtype": "fp32", "device": "cuda",
            "gpu": {"name": gpu}, "model_time_us": 1000.0, "profiled_time_us": 900.0, "ops": ops}
    (path / "settings.json").write_text(json.dumps({
        "version": 1, "plan": plan, "agent": "search", "llm_model": None,
        "budget": {"minutes": 60, "experiments": None, "usd": None}, "shard": shard, "gpu": {"name": gpu},
        "started": "2026-01-01T00:00:00+00:00", "autokernel_ci": "0.1.0"}, indent=1))
    records: list[dict[str, Any]] = []
    n = 0
    for op in ops:
        kf = load(KERNEL_FILES[op["kernel_type"]])
        points = list(kf.config_points())
        versions = [(0, kf, 0.8)]
        for i, s in enumerate((speedups or {}).get(op["id"], [])):
            n += 1
            versions.append((n, kf.with_config(points[(i + 1) % len(points)]), s))
        for vn, version, speedup in versions:
            median = eager_us / speedup
            digest = version.source_hash
            kernel_path = path / "kernels" / op["id"] / f"{vn:04d}_{digest}.py"
            kernel_path.parent.mkdir(parents=True, exist_ok=True)
            kernel_path.write_text(version.source)
            (path / "best").mkdir(exist_ok=True)
            (path / "best" / f"{op['id']}.py").write_text(version.source)
            block = version.config.get("BLOCK", version.config.get("num_warps"))
            records.append(_record(vn, op, digest, "kept", median, eager_us, idea_text.format(block=block)))
            if vn:
                n += 1
                records.append(_record(n, op, "f" * 16, "reverted", median * 1.3, eager_us, "worse"))
    with open(path / "journal.jsonl", "w") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")
        if torn_tail:
            fh.write('{"n": 99, "op_id": "rmsnorm-0", "status": "ke')  # killed mid-write
    (path / "results.tsv").write_text("n\top_id\tstatus\tmedian_us\n" + "".join(
        f"{r['n']}\t{r['op_id']}\t{r['status']}\t{r['median_us']}\n" for r in records))
    if complete:
        # as the loop writes it: experiments count n >= 1, not the starter baselines (n == 0)
        (path / "summary.json").write_text(json.dumps({"version": 1, "experiments": sum(r["n"] >= 1 for r in records),
                                                       "ops": {}, "finished": True}))
    if end_to_end is not None:
        (path / "end_to_end.json").write_text(json.dumps({"version": 1, **end_to_end}))
    return path


def _record(n: int, op: dict[str, Any], digest: str, status: str, median: float, eager_us: float,
            idea: str) -> dict[str, Any]:
    return {"n": n, "time": f"2026-01-01T00:{n // 60:02d}:{n % 60:02d}+00:00", "op_id": op["id"],
            "kernel_type": op["kernel_type"], "agent": "search", "idea": idea, "source_hash": digest,
            "parent_hash": None, "status": status, "stages": dict(STAGES_PASS), "reason": "",
            "median_us": median, "p20_us": median * 0.98, "p80_us": median * 1.02, "best_us_before": None,
            "eager_us": eager_us, "compile_us": eager_us * 0.7, "pct_of_ceiling": 40.0 * eager_us / median / 2,
            "speedup_vs_eager": round(eager_us / median, 4), "speedup_vs_compile": round(eager_us * 0.7 / median, 4),
            "usd": 0.0, "duration_s": 1.0}
