"""`autokernel-ci optimize`: parse the plan and bounds, run the loop, print the summary table.

Loop options that `autokernel_ci.cli` may not declare yet (--workers, --seed, --patience,
--verify-shapes, --timeout, --quiet) are read with defaults, and `python -m autokernel_ci.loop.commands`
accepts them all (see docs/loop.md).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from autokernel_ci.loop.budget import Budget
from autokernel_ci.loop.orchestrator import LoopSettings, optimize
from autokernel_ci.loop.shards import ShardError, parse_shard, split_plan
from autokernel_ci.plan import Plan, PlanError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def add_loop_arguments(p: argparse.ArgumentParser) -> None:
    """Options of `optimize` beyond DESIGN.md §10's list (the lead may add these to cli.py)."""
    p.add_argument("--workers", type=int, default=None,
                   help="evaluation workers (default: one per visible GPU; 1 on cpu)")
    p.add_argument("--seed", type=int, default=0, help="search agent seed (the run is deterministic given it)")
    p.add_argument("--patience", type=int, default=8,
                   help="non-improving experiments in a row before moving to another kernel")
    p.add_argument("--verify-shapes", default=None,
                   help="comma-separated shape sets for the shape sweep (default: the harness's for the device)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one evaluation may take")
    p.add_argument("--quiet", action="store_true", help="no per-experiment lines")


def _default_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def settings_from_args(args: argparse.Namespace) -> LoopSettings:
    shapes = getattr(args, "verify_shapes", None)
    workers = getattr(args, "workers", None)
    if workers is not None and workers < 1:
        raise ValueError(f"--workers {workers}: give at least 1")
    return LoopSettings(
        agent=args.agent, llm_model=args.llm_model,
        budget=Budget(minutes=args.budget_minutes, experiments=args.max_experiments, usd=args.max_usd),
        device=args.device or _default_device(), shard=args.shard, seed=getattr(args, "seed", 0) or 0,
        workers=workers, patience=getattr(args, "patience", 8) or 8,
        timeout_s=getattr(args, "timeout", None) or 300.0,
        verify_shape_sets=tuple(s.strip() for s in shapes.split(",") if s.strip()) if shapes else None,
        quiet=bool(getattr(args, "quiet", False)))


def optimize_main(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        plan = Plan.load(args.plan)
        settings = settings_from_args(args)
        if args.shard:
            k, n = parse_shard(args.shard)
            plan = split_plan(plan, k, n)
            settings.shard = f"{k}/{n}"
        if args.agent == "llm":
            from autokernel_ci.agents.llm import LLMSettings

            LLMSettings.from_env(args.llm_model)  # fail now, not after the baselines, when no model is set
    except (PlanError, ShardError, ValueError) as exc:
        print(f"autokernel-ci optimize: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        summary = optimize(plan, args.run_dir, settings, resume=args.resume)
    except (FileExistsError, RuntimeError) as exc:
        print(f"autokernel-ci optimize: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, FileExistsError) else EXIT_FAILED
    ops = list(summary["ops"].values())
    if ops and all(o["status"] == "failed" for o in ops):
        print("autokernel-ci optimize: no op has a verified starter; see journal.jsonl", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    from autokernel_ci.cli import build_parser as cli_parser

    root = cli_parser()
    sub = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices["optimize"]
    known = {opt for action in parser._actions for opt in action.option_strings}
    if "--workers" not in known:
        add_loop_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return optimize_main(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
