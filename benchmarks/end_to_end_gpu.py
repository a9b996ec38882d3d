"""End-to-end on the GPU: profile the LLaMA-style example at the 7B-like size, plug the starter
kernels in, check outputs and time the forward pass against eager and torch.compile.

    python benchmarks/end_to_end_gpu.py --out /tmp/e2e            # ~5 minutes on one H200
    python benchmarks/end_to_end_gpu.py --out /tmp/e2e --size small --no-compile   # a quick look

Writes DIR/plan.json, DIR/end_to_end.json and DIR/report.md; exits 0 when the check passes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, type=Path, help="directory for plan.json, end_to_end.json, report.md")
    ap.add_argument("--size", default="7b", help="examples/models/llama.py size (default 7b)")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--backend", default="triton", choices=("triton", "cuda"), help="starter kernels to plug in")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile timings")
    ap.add_argument("--compile-backend", default="inductor")
    args = ap.parse_args(argv)

    if args.device == "cpu":  # Triton kernels run through the interpreter without a GPU
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from autokernel_ci.integrate import end_to_end, render_end_to_end
    from autokernel_ci.paths import starter_kernel
    from autokernel_ci.profiling.commands import profile_model_full
    from autokernel_ci.profiling.planner import nine_type_share, render_plan

    start = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    model_ref = f'{ROOT / "examples/models/llama.py"}:build_model(size="{args.size}")'
    plan, profile = profile_model_full(model_ref, dtype=args.dtype, device=args.device)
    plan.save(args.out / "plan.json")
    table = render_plan(plan)
    print(table)
    print(f"time-sum check: operators {profile.profiled_time_us:,.0f} us vs the profiled pass "
          f"{profile.profiled_wall_us:,.0f} us ({profile.coverage:.1%}); nine types {nine_type_share(plan):.1%}")
    print(f"profiled in {time.perf_counter() - start:.0f} s", flush=True)

    kernels, missing = {}, []
    for op in plan.targets():
        try:
            kernels[op.id] = str(starter_kernel(op.kernel_type, args.backend))
        except FileNotFoundError:
            missing.append(op.id)
    if missing:
        print(f"no {args.backend} starter for: {', '.join(missing)}")
    res = end_to_end(model_ref, None, plan, kernels, dtype=args.dtype, device=args.device,
                     compile=not args.no_compile, compile_backend=args.compile_backend)
    text = render_end_to_end(res)
    print(text)
    (args.out / "end_to_end.json").write_text(json.dumps(res.to_dict(), indent=2) + "\n")
    report = [f"# End to end: LLaMA-style {args.size}, {args.dtype}, {res.gpu}", "", "## Plan", "", "```", table, "```",
              "", render_end_to_end(res, markdown=True), "",
              f"Total wall time {time.perf_counter() - start:.0f} s."]
    (args.out / "report.md").write_text("\n".join(report) + "\n")
    print(f"wrote {args.out}/plan.json, end_to_end.json, report.md in {time.perf_counter() - start:.0f} s")
    return 0 if res.status == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
