"""Does the built-in search agent find real speedups on a GPU? (run by hand on the H200; not a test)

For each kernel type: a plan with that one op at its --shape-set shapes (llama7b by default; gpt2 is
the second set) in --dtype (bf16 by default), the
real loop (`autokernel_ci.loop.optimize`, search agent, real harness) for --minutes of budget, then a
table: eager, torch.compile, starter, best found, % of ceiling, speedups, experiments used and
experiments per hour. Writes search_agent.json and search_agent.md (and one run dir per type) to --out.

    python benchmarks/search_agent_gpu.py --minutes 2 --out /tmp/search
    python benchmarks/search_agent_gpu.py --types rmsnorm,softmax --minutes 1 --out /tmp/search
    python benchmarks/search_agent_gpu.py --dtype fp16 --shape-set gpt2 --minutes 2 --out /tmp/search_gpt2
    python benchmarks/search_agent_gpu.py --verify-shapes gpt2,odd --minutes 1 --out /tmp/search_fast
    python benchmarks/search_agent_gpu.py --types matmul --verify-every --minutes 1.5 --out /tmp/search_verify_first
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from autokernel_ci.loop import Budget, LoopSettings, optimize  # noqa: E402
from autokernel_ci.loop.journal import is_experiment  # noqa: E402
from autokernel_ci.plan import Plan, PlanOp  # noqa: E402
from autokernel_ci.specs import KERNEL_TYPES, get_spec  # noqa: E402

COLUMNS = ("type", "shapes", "eager_us", "compile_us", "starter_us", "best_us", "pct_of_ceiling", "vs_starter",
           "vs_eager", "vs_compile", "experiments", "verified", "not_confirmed", "kept", "exp_per_hour", "stopped")


def one_op_plan(kind: str, dtype: str, shape_set: str = "llama7b") -> Plan:
    spec = get_spec(kind)
    if shape_set not in spec.shape_sets:
        raise ValueError(f"{kind} has no shape set {shape_set!r}: choose one of {sorted(spec.shape_sets)}")
    shapes = [dict(s) for s in spec.shape_sets[shape_set]]
    op = PlanOp(id=f"{kind}-0", kernel_type=kind, name=kind, shapes=shapes, dtype=dtype, calls=1, time_us=1.0,
                share=1.0, bound="compute" if spec.primary_metric == "TFLOP/s" else "memory", floor_us=None,
                amdahl_gain=2.0)
    return Plan(model="benchmarks/search_agent_gpu.py", dtype=dtype, device="cuda", ops=[op])


def journal_counts(run: Path) -> dict[str, int]:
    """Experiments whose stages ran ("verified": the loop times a search candidate first and verifies only one faster
    than the best; --verify-every verifies all) and keeps that the re-timing in turn did not confirm
    ("not_confirmed": faster on a first timing only)."""
    path = run / "journal.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    experiments = [r for r in records if is_experiment(r)]
    return {"verified": sum(1 for r in experiments if set((r.get("stages") or {}).values()) - {"not_run"}),
            "not_confirmed": sum(1 for r in experiments if r.get("confirm") and not r["confirm"].get("confirmed"))}


def row(kind: str, summary: dict[str, Any], run: Path) -> dict[str, Any]:
    op = summary["ops"].get(f"{kind}-0", {})
    hours = summary["elapsed_s"] / 3600.0
    return {"type": kind, "shapes": ", ".join(get_spec(kind).describe_shape(s) for s in op.get("shapes", [])),
            "eager_us": op.get("eager_us"), "compile_us": op.get("compile_us"), "starter_us": op.get("starter_us"),
            "best_us": op.get("best_us"), "pct_of_ceiling": op.get("pct_of_ceiling"),
            "vs_starter": op.get("speedup_vs_starter"), "vs_eager": op.get("speedup_vs_eager"),
            "vs_compile": op.get("speedup_vs_compile"), "experiments": op.get("experiments", 0),
            **journal_counts(run), "kept": op.get("kept", 0),
            "exp_per_hour": round(summary["experiments"] / hours, 1) if hours else None,
            "stopped": summary.get("stopped"), "status": op.get("status"), "idea": op.get("idea")}


def markdown(rows: list[dict[str, Any]], gpu: str, minutes: float, dtype: str = "bf16",
             shape_set: str = "llama7b") -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.2f}"
        return "–" if v is None else str(v)

    lines = [f"# Search agent on {gpu}: {minutes:g} min per kernel type, {dtype}, {shape_set} shapes", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(r[c]) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_tables(out: Path, rows: list[dict[str, Any]], gpu: str, args: argparse.Namespace) -> str:
    (out / "search_agent.json").write_text(json.dumps({"gpu": gpu, "minutes": args.minutes, "dtype": args.dtype,
                                                       "shape_set": args.shape_set, "rows": rows}, indent=2) + "\n")
    text = markdown(rows, gpu, args.minutes, args.dtype, args.shape_set)
    (out / "search_agent.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", default=",".join(KERNEL_TYPES), help="comma-separated kernel types")
    ap.add_argument("--minutes", type=float, default=1.0, help="loop budget per type (baselines included)")
    ap.add_argument("--max-experiments", type=int, default=None)
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--shape-set", default="llama7b", help="the spec's shape set to optimise at (e.g. gpt2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--verify-shapes", default=None,
                    help="shape sets each candidate is verified on (comma list; default: all on the GPU). Fewer sets "
                         "make an experiment cheaper (every shape of every set is run and checked) but a kept kernel "
                         "is then proven on those sets only: say so next to the table")
    ap.add_argument("--verify-every", action="store_true",
                    help="verify every candidate before timing it (the loop's default times first and verifies "
                         "only one faster than the best)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        import torch

        gpu = torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001
        gpu = "unknown GPU"
    rows = []
    for kind in [t.strip() for t in args.types.split(",") if t.strip()]:
        run = out / f"run_{kind}"
        shutil.rmtree(run, ignore_errors=True)
        verify_sets = tuple(s for s in args.verify_shapes.split(",") if s) if args.verify_shapes else None
        settings = LoopSettings(device="cuda", seed=args.seed, workers=1, verify_shape_sets=verify_sets,
                                screen=not args.verify_every,
                                budget=Budget(minutes=args.minutes, experiments=args.max_experiments))
        t0 = time.time()
        try:
            summary = optimize(one_op_plan(kind, args.dtype, args.shape_set), run, settings)
        except Exception as exc:  # noqa: BLE001 - one type's failure must not hide the others
            print(f"{kind}: loop failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            rows.append({**{c: None for c in COLUMNS}, "type": kind, "stopped": f"error: {exc}"})
            continue
        r = row(kind, summary, run)
        rows.append(r)
        print(f"{kind}: {r['experiments']} experiments in {time.time() - t0:.0f} s, best {r['best_us']} us "
              f"({r['vs_starter']}x starter, {r['vs_compile']}x compile, {r['pct_of_ceiling']}% of ceiling)",
              flush=True)
        write_tables(out, rows, gpu, args)  # after every type: a killed run keeps what it measured
    text = write_tables(out, rows, gpu, args)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
