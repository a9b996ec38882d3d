"""`autokernel-ci profile`: load the model, profile it, classify, write and print the plan."""

from __future__ import annotations

import argparse
import sys

import torch

from autokernel_ci.plan import Plan
from autokernel_ci.profiling.classify import classify
from autokernel_ci.profiling.loading import DTYPES, ForwardError, LoadError, build_inputs, build_model, run_forward
from autokernel_ci.profiling.planner import build_plan, render_plan
from autokernel_ci.profiling.profiler import TIME_SUM_TOLERANCE, Profile, profile_forward

EXIT_OK, EXIT_USAGE = 0, 2


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device(device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        raise LoadError("--device cuda but torch sees no GPU (torch.cuda.is_available() is False); "
                        "use --device cpu or install a CUDA build of torch")


def profile_model(model_ref: str, inputs_ref: str | None = None, *, dtype: str = "bf16", device: str | None = None,
                  top: int | None = None) -> Plan:
    """Profile `model_ref` on its inputs and return the plan (raises LoadError / ForwardError / OOM)."""
    return profile_model_full(model_ref, inputs_ref, dtype=dtype, device=device, top=top)[0]


def profile_model_full(model_ref: str, inputs_ref: str | None = None, *, dtype: str = "bf16",
                       device: str | None = None, top: int | None = None) -> tuple[Plan, Profile]:
    """profile_model() plus the raw profile (for the time-sum check and classification details)."""
    device = device or default_device()
    check_device(device)
    if dtype not in DTYPES:
        raise LoadError(f"--dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    torch_dtype = DTYPES[dtype]
    model = build_model(model_ref, dtype=torch_dtype, device=device)
    inputs = build_inputs(model_ref, inputs_ref, dtype=torch_dtype, device=device)
    run_forward(model, inputs)  # a mismatch fails here with the input shapes named
    profile = profile_forward(model, inputs, device=device, dtype=torch_dtype)
    plan = build_plan(profile, classify(profile), model_ref=model_ref, inputs_ref=inputs_ref, top=top)
    return plan, profile


def oom_message(model_ref: str, exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else "out of memory"
    return (f"the GPU ran out of memory running {model_ref} ({first}); use a smaller model size or batch "
            "(e.g. build_model(size=\"small\") or a shorter sequence in --inputs), or a GPU with more memory")


def profile_main(args: argparse.Namespace) -> int:
    try:
        plan, profile = profile_model_full(args.model, args.inputs, dtype=args.dtype, device=args.device, top=args.top)
    except (LoadError, ForwardError) as exc:
        print(f"autokernel-ci profile: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except torch.OutOfMemoryError as exc:
        print(f"autokernel-ci profile: {oom_message(args.model, exc)}", file=sys.stderr)
        return EXIT_USAGE
    print(render_plan(plan))
    tol = TIME_SUM_TOLERANCE.get(plan.device, 0.25)
    if not profile.time_sum_ok():
        print(f"warning: operator time ({profile.profiled_time_us:.1f} us) sums to {profile.coverage:.0%} of the "
              f"profiled pass's wall time ({profile.profiled_wall_us:.1f} us; tolerance +-{tol:.0%}): "
              "a model this small is dominated by Python/launch overhead, "
              "so shares are rough; profile a larger size or batch", file=sys.stderr)
    if args.json:
        plan.save(args.json)
        print(f"plan written to {args.json}")
    return EXIT_OK
