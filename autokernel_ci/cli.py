"""The `autokernel-ci` command line (DESIGN.md §10). Thin: parse, then hand off to the owning module.

Each command's work lives in the module that owns it; this file only declares arguments and
imports the handler lazily, so `autokernel-ci --help` stays fast (no torch import) and a command
whose module fails to import says which one and why.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

EXIT_OK, EXIT_REJECTED, EXIT_USAGE = 0, 1, 2

# command -> "module:function"; the function takes the parsed argparse.Namespace, returns an exit code.
HANDLERS: dict[str, str] = {
    "profile": "autokernel_ci.profiling.commands:profile_main",
    "verify": "autokernel_ci.harness.commands:verify_main",
    "bench": "autokernel_ci.harness.commands:bench_main",
    "optimize": "autokernel_ci.loop.commands:optimize_main",
    "run": "autokernel_ci.pipeline:run_main",
    "publish": "autokernel_ci.publish.commands:publish_main",
    "action": "autokernel_ci.action:action_main",
    "gpu": "autokernel_ci.hardware.commands:gpu_main",
}


def _add_device(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="where to run (default: cuda when a GPU is visible, else cpu)")


def _add_shard(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shard", default=None, metavar="K/N",
                   help="optimise only shard K of N (1-based) of the plan; shards balance expected gain")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="autokernel-ci",
        description="Profile a PyTorch model, optimise its slowest GPU kernels in a bounded agent loop, "
        "verify each in five stages and publish them as a pull request.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("profile", help="profile a model and write the optimisation plan")
    p.add_argument("--model", required=True, metavar="FILE.py:CALLABLE",
                   help="function or class returning the nn.Module")
    p.add_argument("--inputs", default=None, metavar="FILE.py:CALLABLE",
                   help="function returning the example inputs (a tuple of tensors)")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp32"))
    _add_device(p)
    p.add_argument("--json", default=None, metavar="PLAN.json", help="write the plan here")
    p.add_argument("--top", type=int, default=None, help="keep only the N ops with the largest Amdahl gain")

    p = sub.add_parser("verify", help="run the five-stage verification of one kernel file")
    p.add_argument("kernel", metavar="KERNEL.py")
    _add_device(p)
    p.add_argument("--json", default=None, metavar="OUT.json", help="write the verdict here")
    p.add_argument("--shapes", default=None,
                   help="comma-separated shape sets for the sweep (default: cpu+edge+odd on cpu, all on cuda)")
    p.add_argument("--timeout", type=float, default=None, help="seconds before the worker is killed")
    p.add_argument("--seed", type=int, default=None, help="input seed (default: fresh, unknowable)")

    p = sub.add_parser("bench", help="benchmark one kernel file against eager and torch.compile")
    p.add_argument("kernel", metavar="KERNEL.py")
    _add_device(p)
    p.add_argument("--json", default=None, metavar="OUT.json")
    p.add_argument("--shapes", default=None, help="comma-separated shape sets (default: the model-like set)")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")

    p = sub.add_parser("optimize", help="run the bounded agent loop over a plan")
    p.add_argument("--plan", required=True, metavar="PLAN.json")
    p.add_argument("--agent", choices=("search", "llm"), default="search")
    p.add_argument("--llm-model", default=None, metavar="STR", help="a litellm model string")
    p.add_argument("--budget-minutes", type=float, default=60.0)
    p.add_argument("--max-experiments", type=int, default=None)
    p.add_argument("--max-usd", type=float, default=None)
    p.add_argument("--run-dir", required=True, metavar="DIR")
    p.add_argument("--resume", action="store_true", help="continue the journal in --run-dir")
    _add_device(p)
    _add_shard(p)

    p = sub.add_parser("run", help="profile -> optimize -> end-to-end verify -> publish")
    p.add_argument("--config", default=None, metavar="FILE", help="config file (default .github/autokernel.yml)")
    p.add_argument("--example", default=None, metavar="NAME", help="use a bundled example model")
    p.add_argument("--agent", choices=("search", "llm"), default=None)
    p.add_argument("--budget-minutes", type=float, default=None)
    p.add_argument("--max-experiments", type=int, default=None)
    p.add_argument("--run-dir", default=None, metavar="DIR")
    p.add_argument("--local", action="store_true", help="publish to a local branch (default outside Actions)")
    _add_device(p)
    _add_shard(p)

    p = sub.add_parser("publish", help="put kept kernels, tests and the report on the bot branch; open/update the PR")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--local", action="store_true", help="commit on a local branch, no network (default)")
    mode.add_argument("--github", action="store_true", help="push and open/update the pull request")
    p.add_argument("--repo", default=".", help="the model repository (default: current directory)")

    sub.add_parser("action", help="GitHub Actions entrypoint (reads GITHUB_* variables)")

    p = sub.add_parser("gpu", help="print the detected GPU's spec")
    p.add_argument("--calibrate", action="store_true", help="measure copy bandwidth and a bf16 GEMM now")
    p.add_argument("--json", default=None, metavar="OUT.json")
    return parser


def _version() -> str:
    from autokernel_ci import __version__

    return __version__


def _resolve(command: str) -> Callable[[argparse.Namespace], int]:
    module_name, func_name = HANDLERS[command].split(":")
    module = importlib.import_module(module_name)
    return getattr(module, func_name)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    try:
        handler = _resolve(args.command)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("autokernel_ci"):
            print(f"autokernel-ci {args.command}: not built yet in this version ({exc.name} is missing)",
                  file=sys.stderr)
            return EXIT_USAGE
        raise
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
