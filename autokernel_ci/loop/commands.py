"""`autokernel-ci optimize` (and the loop half of `autokernel-ci run`): parse the plan and bounds,
run the loop, print the summary table.

The loop tuning options (--workers, --seed, --patience, --verify-shapes, --timeout, --quiet) are
declared by `autokernel_ci.cli.add_loop_arguments` (re-exported here) on both `optimize` and `run`,
so `--help` stays free of torch; `settings_from_args` turns them into LoopSettings for `optimize`,
and `pipeline.run_main` passes `loop_options(args)` to `run_pipeline` for `run`. `python -m autokernel_ci.loop.commands`
is `autokernel-ci optimize`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

from autokernel_ci.cli import add_loop_arguments as add_loop_arguments
from autokernel_ci.loop.budget import Budget
from autokernel_ci.loop.interrupt import RESUME_HINT, LoopInterrupted
from autokernel_ci.loop.orchestrator import LoopSettings, optimize
from autokernel_ci.loop.shards import ShardError, parse_shard, split_plan
from autokernel_ci.plan import Plan, PlanError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# the add_loop_arguments options -> LoopSettings fields
LOOP_OPTIONS = {"workers": "workers", "seed": "seed", "patience": "patience", "timeout": "timeout_s",
                "verify_shapes": "verify_shape_sets", "verify_every": "screen", "confirm_pairs": "confirm_pairs",
                "quiet": "quiet"}


def _default_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def loop_options(args: argparse.Namespace) -> dict[str, Any]:
    """The loop tuning options given on the command line, as LoopSettings fields (absent ones left out)."""
    out: dict[str, Any] = {}
    for name, field_name in LOOP_OPTIONS.items():
        value = getattr(args, name, None)
        if value is None:
            continue
        if name == "workers" and value < 1:
            raise ValueError(f"--workers {value}: give at least 1")
        if name == "verify_shapes":
            value = tuple(s.strip() for s in value.split(",") if s.strip()) or None
        if name == "verify_every":
            value = not value  # --verify-every turns the screen off
        out[field_name] = value
    return out


def settings_from_args(args: argparse.Namespace) -> LoopSettings:
    return LoopSettings(
        agent=args.agent or "search", llm_model=args.llm_model,
        budget=Budget(minutes=args.budget_minutes, experiments=args.max_experiments, usd=args.max_usd),
        device=args.device or _default_device(), shard=args.shard, **loop_options(args))


def empty_budget(minutes: float | None, experiments: int | None, usd: float | None, *, where: str = "") -> str | None:
    """Why bounds this tight allow no experiment at all (then nothing should start), or None."""
    if experiments is not None and experiments <= 0:
        return f"--max-experiments {experiments}{where} allows no experiment: give 1 or more, or leave it out"
    if usd is not None and usd <= 0:
        return (f"--max-usd {usd:g}{where} allows no spend, so no experiment may start: give a positive cap "
                "(e.g. --max-usd 5), or leave it out for no USD cap")
    if minutes is not None and minutes <= 0:
        return f"--budget-minutes {minutes:g}{where} leaves no time: give a positive budget (e.g. --budget-minutes 30)"
    return None


def llm_model_unused(agent: str | None, llm_model: str | None) -> str | None:
    if llm_model and agent != "llm":
        return (f"--llm-model {llm_model} is used only by the llm agent, but the agent is {agent or 'search'}: "
                "add --agent llm (or drop --llm-model)")
    return None


def optimize_main(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    try:
        plan = Plan.load(args.plan)
        settings = settings_from_args(args)
        problem = llm_model_unused(settings.agent, args.llm_model) or empty_budget(
            args.budget_minutes, args.max_experiments, args.max_usd)
        if problem:
            print(f"autokernel-ci optimize: stopped before the first experiment: {problem}", file=sys.stderr)
            return EXIT_USAGE
        if args.shard:
            k, n = parse_shard(args.shard)
            plan = split_plan(plan, k, n)
            settings.shard = f"{k}/{n}"
        if settings.agent == "llm":
            from autokernel_ci.agents.llm import LLMSettings

            LLMSettings.from_env(args.llm_model)  # fail now, not after the baselines, when no model is set
    except (PlanError, ShardError, ValueError) as exc:
        print(f"autokernel-ci optimize: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        summary = optimize(plan, args.run_dir, settings, resume=args.resume)
    except LoopInterrupted as exc:
        print(f"autokernel-ci optimize: {exc.describe(RESUME_HINT)}", file=sys.stderr)
        return exc.exit_code
    except (FileExistsError, RuntimeError) as exc:
        print(f"autokernel-ci optimize: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, FileExistsError) else EXIT_FAILED
    ops = list(summary["ops"].values())
    if ops and all(o["status"] == "failed" for o in ops):
        print("autokernel-ci optimize: no op has a verified starter; see journal.jsonl", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """`python -m autokernel_ci.loop.commands` is `autokernel-ci optimize` (same parser)."""
    from autokernel_ci.cli import build_parser as cli_parser

    root = cli_parser()
    sub = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["optimize"]


# -- autokernel-ci run -------------------------------------------------------------------------------
def run_flag_problem(args: argparse.Namespace, config: Any) -> str | None:
    """What in `autokernel-ci run`'s flags and config would waste a profile or be ignored, or None
    (pipeline.run_main asks before profiling)."""
    problem = (llm_model_unused(config.agent, getattr(args, "llm_model", None))
               or empty_budget(config.budget_minutes, config.max_experiments, config.max_usd,
                               where=" (command line or config file)"))
    if not problem and getattr(args, "resume", False) and not config.run_dir:
        problem = ("--resume continues an earlier run: pass its directory with --run-dir DIR "
                   "(e.g. --run-dir .autokernel-ci/runs/<time>)")
    return problem


def main(argv: Sequence[str] | None = None) -> int:
    return optimize_main(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
