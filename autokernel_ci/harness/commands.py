"""`autokernel-ci verify` and `autokernel-ci bench` (argument parsing lives in autokernel_ci/cli.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

EXIT_OK, EXIT_REJECTED, EXIT_USAGE = 0, 1, 2


def _shape_sets(value: str | None) -> list[str] | None:
    return [s.strip() for s in value.split(",") if s.strip()] if value else None


def _write_json(path: str | None, data: dict) -> None:
    if path:
        Path(path).write_text(json.dumps(data, indent=2) + "\n")


def verify_main(args: argparse.Namespace) -> int:
    """0: all five stages pass; 1: rejected (wrong, cheating, crash, contract broken); 2: usage error."""
    from autokernel_ci.harness.evaluator import HarnessError, verify
    from autokernel_ci.render import render_verdict

    if not Path(args.kernel).is_file():
        print(f"autokernel-ci verify: kernel file {args.kernel} does not exist", file=sys.stderr)
        return EXIT_USAGE
    try:
        verdict = verify(args.kernel, device=args.device, shape_sets=_shape_sets(args.shapes),
                         seed=args.seed, timeout_s=args.timeout, dtypes=getattr(args, "dtypes", None))
    except (ValueError, KeyError) as exc:
        print(f"autokernel-ci verify: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except HarnessError as exc:
        print(f"autokernel-ci verify: harness error (not the kernel's fault): {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(render_verdict(verdict))
    _write_json(args.json, verdict.to_dict())
    return EXIT_OK if verdict.passed else EXIT_REJECTED


def bench_main(args: argparse.Namespace) -> int:
    """0: benchmarked; 1: the kernel could not run or was caught below the physical floor; 2: usage error."""
    from autokernel_ci.harness.evaluator import BenchFailed, HarnessError, bench
    from autokernel_ci.render import render_bench, render_verdict
    from autokernel_ci.specs import get_spec

    if not Path(args.kernel).is_file():
        print(f"autokernel-ci bench: kernel file {args.kernel} does not exist", file=sys.stderr)
        return EXIT_USAGE
    shapes = None
    sets = _shape_sets(args.shapes)
    try:
        if sets:
            from autokernel_ci import kernelfile

            try:
                kernel_type = kernelfile.load(args.kernel).kernel_type
            except kernelfile.KernelFileError:
                kernel_type = None  # the kernel's fault, not the command line's: bench's INVALID verdict, exit 1
            shapes = get_spec(kernel_type).shapes(*sets) if kernel_type else None
        result = bench(args.kernel, device=args.device, shapes=shapes, compile_baseline=not args.no_compile,
                       dtypes=getattr(args, "dtypes", None))
    except BenchFailed as exc:
        print(render_verdict(exc.verdict, hardening=False))
        _write_json(args.json, exc.verdict.to_dict())
        return EXIT_REJECTED
    except (ValueError, KeyError) as exc:
        print(f"autokernel-ci bench: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except HarnessError as exc:
        print(f"autokernel-ci bench: harness error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(render_bench(result))
    # bench times whatever the file computes: a kernel that writes its input (tests/harness/exploits/
    # input_mutation.py) was timed on the CPU with exit 0 and nothing said about its results
    print(f"results not checked: bench only times the kernel; `autokernel-ci verify {args.kernel}` proves it correct "
          "(optimize and run do both)")
    _write_json(args.json, result.to_dict())
    return EXIT_REJECTED if any(v.startswith("fail") for v in result.checks.values()) else EXIT_OK
