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

from autokernel_ci.plan import DTYPE_NAMES

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


_DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def _number(kind: type, flag: str, minimum: float, example: str, *, exclusive: bool = False,
            unset: str = "") -> Callable[[str], float]:
    """An argparse type: a finite int/float >= minimum (> with exclusive); the error names the value and the fix."""
    what = "a whole number" if kind is int else "a number"
    bound = f"{'above' if exclusive else 'at least'} {minimum:g}"

    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}: write e.g. {flag} {example}{unset}") from None
        if value != value or value in (float("inf"), float("-inf")) or value < minimum or (
                exclusive and value == minimum):
            raise argparse.ArgumentTypeError(f"{text} is out of range: give {what} {bound}, "
                                             f"e.g. {flag} {example}{unset}")
        return value

    convert.__name__ = kind.__name__
    return convert


def parse_dtypes(text: str) -> list[str]:
    """`--dtypes bf16,fp32` -> ["bf16", "fp32"] (no torch import; the harness checks the kernel type runs in them)."""
    names = [t.strip().lower() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in DTYPE_NAMES and n not in _DTYPE_ALIASES]
    if bad or not names:
        shown = ", ".join(repr(b) for b in bad) if bad else repr(text)
        raise argparse.ArgumentTypeError(f"unknown dtype {shown}: allowed {', '.join(DTYPE_NAMES)} "
                                         "(comma-separated, e.g. --dtypes bf16,fp32)")
    out: list[str] = []
    for n in names:
        n = _DTYPE_ALIASES.get(n, n)
        if n not in out:
            out.append(n)
    return out


def existing_dir(text: str) -> str:
    import os

    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a directory: pass the model repository's path "
                                         "(e.g. --repo .)")
    return text


def _add_device(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="where to run (default: cuda when a GPU is visible, else cpu)")


def _add_shard(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shard", default=None, metavar="K/N",
                   help="optimise only shard K of N (1-based) of the plan; shards balance expected gain")


def _add_bounds(p: argparse.ArgumentParser | argparse._ArgumentGroup, *, minutes_default: float | None) -> None:
    """The agent and the loop's three bounds, shared by `optimize` and `run`."""
    p.add_argument("--agent", choices=("search", "llm"), default=None if minutes_default is None else "search",
                   help="search: built in, no network (default); llm: a litellm model proposes kernels")
    p.add_argument("--llm-model", default=None, metavar="STR",
                   help="a litellm model string for --agent llm, e.g. openai/gpt-4o (keys from the environment)")
    p.add_argument("--budget-minutes", type=_number(float, "--budget-minutes", 0, "60"), default=minutes_default,
                   metavar="N", help="wall-time budget of the loop"
                   + (f" (default {minutes_default:g})" if minutes_default is not None
                      else " (default: 60 on cuda, 5 on cpu)"))
    p.add_argument("--max-experiments", type=_number(int, "--max-experiments", 0, "20"), default=None, metavar="N",
                   help="stop after N experiments (baselines do not count)")
    p.add_argument("--max-usd", type=_number(float, "--max-usd", 0, "5", unset=", or leave it out for no cap"),
                   default=None, metavar="X", help="LLM spend cap in US dollars (0 allows no experiment)")


def add_loop_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """Options of `optimize` (and `run`) beyond DESIGN.md §10's list; read by
    autokernel_ci.loop.commands.settings_from_args into LoopSettings. Declared here, not in
    autokernel_ci.loop, so that `--help` never imports torch (the loop package does)."""
    p.add_argument("--workers", type=_number(int, "--workers", 1, "2"), default=None, metavar="N",
                   help="evaluation workers (default: one per visible GPU; 1 on cpu)")
    p.add_argument("--seed", type=_number(int, "--seed", 0, "0"), default=0, metavar="S",
                   help="search agent seed (the run is deterministic given it; default 0)")
    p.add_argument("--patience", type=_number(int, "--patience", 1, "8"), default=8, metavar="K",
                   help="non-improving experiments in a row before moving to another kernel (default 8)")
    p.add_argument("--verify-shapes", default=None, metavar="SETS",
                   help="comma-separated shape sets for the shape sweep (default: the harness's for the device)")
    p.add_argument("--timeout", type=_number(float, "--timeout", 0, "300", exclusive=True), default=300.0,
                   metavar="S", help="seconds one evaluation may take (default 300)")
    p.add_argument("--verify-every", action="store_true",
                   help="verify every search-agent candidate before timing it (default: time it first and verify "
                   "only one faster than the best; nothing unverified is ever kept)")
    p.add_argument("--confirm-pairs", type=_number(int, "--confirm-pairs", 0, "2"), default=None, metavar="N",
                   help="re-time a candidate that beats the best in turn with it N times (best first) and keep it "
                   "only if it wins every time (default 2; 0 keeps on the first timing)")
    p.add_argument("--quiet", action="store_true", help="no per-experiment lines (the summary table is still printed)")


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
    p.add_argument("--dtype", default="bf16", choices=DTYPE_NAMES)
    _add_device(p)
    p.add_argument("--json", default=None, metavar="PLAN.json", help="write the plan here")
    p.add_argument("--top", type=_number(int, "--top", 1, "3"), default=None, metavar="N",
                   help="keep only the N ops with the largest Amdahl gain")

    p = sub.add_parser("verify", help="run the five-stage verification of one kernel file")
    p.add_argument("kernel", metavar="KERNEL.py")
    _add_device(p)
    p.add_argument("--json", default=None, metavar="OUT.json", help="write the verdict here")
    p.add_argument("--shapes", default=None,
                   help="comma-separated shape sets for the sweep (default: cpu+edge+odd on cpu, all on cuda)")
    p.add_argument("--dtypes", type=parse_dtypes, default=None, metavar="LIST",
                   help=f"comma-separated dtypes to verify in, from {','.join(DTYPE_NAMES)} "
                   "(default: every dtype the kernel type runs in)")
    p.add_argument("--timeout", type=_number(float, "--timeout", 0, "300", exclusive=True), default=None,
                   metavar="S", help="seconds a verify may take before the worker is killed (default 300)")
    p.add_argument("--seed", type=int, default=None, help="input seed (default: fresh, unknowable)")

    p = sub.add_parser("bench", help="benchmark one kernel file against eager and torch.compile")
    p.add_argument("kernel", metavar="KERNEL.py")
    _add_device(p)
    p.add_argument("--json", default=None, metavar="OUT.json")
    p.add_argument("--shapes", default=None, help="comma-separated shape sets (default: the model-like set)")
    p.add_argument("--dtypes", type=parse_dtypes, default=None, metavar="LIST",
                   help=f"comma-separated dtypes to benchmark in, from {','.join(DTYPE_NAMES)} "
                   "(default: every dtype the kernel type runs in)")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")

    p = sub.add_parser("optimize", help="run the bounded agent loop over a plan")
    p.add_argument("--plan", required=True, metavar="PLAN.json")
    p.add_argument("--run-dir", required=True, metavar="DIR")
    p.add_argument("--resume", action="store_true", help="continue the journal in --run-dir")
    _add_bounds(p, minutes_default=60.0)
    _add_device(p)
    _add_shard(p)
    add_loop_arguments(p.add_argument_group("loop tuning"))

    p = sub.add_parser("run", help="profile -> optimize -> end-to-end verify -> publish")
    p.add_argument("--config", default=None, metavar="FILE", help="config file (default .github/autokernel.yml)")
    p.add_argument("--example", default=None, metavar="NAME", help="use a bundled example model (llama, gpt2, bert)")
    p.add_argument("--repo", default=".", type=existing_dir, metavar="DIR",
                   help="the model repository: config, relative paths and the bot branch (default: .)")
    p.add_argument("--top", type=_number(int, "--top", 1, "3"), default=None, metavar="N",
                   help="optimise the N ops with the largest Amdahl gain (default 3)")
    _add_bounds(p, minutes_default=None)
    p.add_argument("--run-dir", default=None, metavar="DIR",
                   help="where the run goes (default .autokernel-ci/runs/<time> in the repository)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --run-dir (reuses its plan.json and journal)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--local", action="store_true",
                      help="publish to a local branch, no network (default outside GitHub Actions)")
    mode.add_argument("--github", action="store_true",
                      help="push and open/update the PR (needs GITHUB_REPOSITORY and GITHUB_TOKEN)")
    _add_device(p)
    _add_shard(p)
    add_loop_arguments(p.add_argument_group("loop tuning"))

    p = sub.add_parser("publish", help="put kept kernels, tests and the report on the bot branch; open/update the PR")
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--local", action="store_true", help="commit on a local branch, no network (default)")
    mode.add_argument("--github", action="store_true", help="push and open/update the pull request")
    p.add_argument("--repo", default=".", type=existing_dir, metavar="DIR",
                   help="the model repository (default: current directory)")
    p.add_argument("--config", default=None, metavar="FILE",
                   help="config file: branch, kernels_dir, min_speedup, labels (default .github/autokernel.yml)")
    p.add_argument("--json", default=None, metavar="OUT.json", help="also write the result (operation, PR, report)")

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
