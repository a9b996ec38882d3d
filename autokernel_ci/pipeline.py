"""`autokernel-ci run`: profile -> optimize -> end-to-end verify -> publish, in one command.

Each stage hands the next an artifact on disk (plan.json, the run directory, end_to_end.json
inside it), so a run can be inspected, resumed (`autokernel-ci optimize --resume`) or published
later (`autokernel-ci publish RUN_DIR`). Locally (the default outside GitHub Actions) it publishes
to a local branch and writes the report; in Actions with --github it pushes and opens the PR.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from autokernel_ci.config import Config, ConfigError, load_config
from autokernel_ci.loop.interrupt import LoopInterrupted

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
_PACKAGE_DIR = Path(__file__).resolve().parent

# Bundled examples: file in examples/models/ and the size on each device. CPU sizes run every
# stage through the Triton interpreter in minutes; the CUDA sizes have the real models' layer shapes.
EXAMPLES: dict[str, tuple[str, dict[str, str]]] = {
    "llama": ("llama.py", {"cpu": "tiny", "cuda": "7b"}),
    "gpt2": ("gpt2.py", {"cpu": "tiny", "cuda": "small"}),
    "bert": ("bert.py", {"cpu": "tiny", "cuda": "base"}),
}


class PipelineError(RuntimeError):
    pass


@dataclass
class PipelineResult:
    run_dir: Path
    plan_path: Path
    device: str
    summary: dict[str, Any]
    end_to_end: dict[str, Any] | None
    note: str = ""


def example_file(name: str) -> Path:
    """The example model file: from the installed package (_data) or the source checkout."""
    if name not in EXAMPLES:
        raise ConfigError(f"unknown example {name!r}: choose one of {', '.join(EXAMPLES)}")
    filename = EXAMPLES[name][0]
    for root in (_PACKAGE_DIR / "_data" / "examples", _PACKAGE_DIR.parent / "examples"):
        path = root / "models" / filename
        if path.is_file():
            return path
    raise PipelineError(f"example {name!r} ({filename}) is not installed: reinstall autokernel-ci from a full "
                        "checkout (`pip install .`), or pass --config with a model")


def example_refs(name: str, device: str) -> tuple[str, str]:
    path = example_file(name)
    size = EXAMPLES[name][1][device]
    return f'{path}:build_model(size="{size}")', f'{path}:example_inputs(size="{size}")'


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _anchor(ref: str | None, repo: Path) -> str | None:
    """A FILE.py:CALLABLE reference made absolute against the repository (the config's paths are
    relative to the repository root, wherever the command runs from)."""
    if not ref:
        return ref
    file_part, sep, rest = ref.partition(":")
    path = Path(file_part)
    return ref if path.is_absolute() else f"{(repo / path).as_posix()}{sep}{rest}"


def default_run_dir(repo: Path) -> Path:
    from autokernel_ci.publish.publisher import work_dir

    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return work_dir(repo) / "runs" / stamp


def run_pipeline(config: Config, *, repo: Path, run_dir: Path | None = None, resume: bool = False,
                 loop_options: dict[str, Any] | None = None,
                 log: Callable[[str], None] | None = None) -> PipelineResult:
    """Profile -> optimize -> end to end; returns where everything landed.

    loop_options: extra LoopSettings fields (workers, seed, patience, timeout_s, ...) from the CLI."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    from autokernel_ci.loop import Budget, LoopSettings, optimize, split_plan
    from autokernel_ci.profiling.commands import profile_model

    device = config.device or default_device()
    if config.model:
        model_ref, inputs_ref = _anchor(config.model, repo), _anchor(config.inputs, repo)
    elif config.example:
        model_ref, inputs_ref = example_refs(config.example, device)
    else:
        raise ConfigError("no model to optimise: set `model: FILE.py:CALLABLE` in .github/autokernel.yml "
                          "or pass --example llama")
    run_dir = Path(run_dir or config.run_dir or default_run_dir(repo))
    if not run_dir.is_absolute():
        run_dir = repo / run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    plan_path = run_dir / "plan.json"
    if resume and plan_path.is_file():
        from autokernel_ci.plan import Plan

        plan = Plan.load(plan_path)
        log(f"[1/4] profile: reusing {plan_path}")
    else:
        log(f"[1/4] profile {model_ref} ({config.dtype}, {device})")
        plan = profile_model(model_ref, inputs_ref, dtype=config.dtype, device=device, top=config.top)
        plan.save(plan_path)
    if config.shard:
        k, n = config.shard_pair()
        plan = split_plan(plan, k, n)
    minutes, experiments = config.resolved_budget(device)
    if config.agent == "llm":
        os.environ.setdefault("AUTOKERNEL_LLM_MODEL", config.llm_model or "")
        if config.llm_api_base:
            os.environ["AUTOKERNEL_LLM_API_BASE"] = config.llm_api_base
    settings = LoopSettings(agent=config.agent, llm_model=config.llm_model,
                            budget=Budget(minutes=minutes, experiments=experiments, usd=config.max_usd),
                            device=device, shard=config.shard, **(loop_options or {}))
    log(f"[2/4] optimize {len(plan.targets())} op(s) into {run_dir} "
        f"(budget {minutes:g} min, {experiments or 'no'} experiment cap, agent {config.agent})")
    summary = optimize(plan, run_dir, settings, resume=resume)
    log("[3/4] end-to-end check")
    e2e, note = _end_to_end(model_ref, inputs_ref, plan, run_dir, summary, config.dtype, device,
                            min_speedup=config.min_speedup)
    if e2e is not None:
        (run_dir / "end_to_end.json").write_text(json.dumps({"version": 1, **e2e}, indent=2, default=str) + "\n")
    return PipelineResult(run_dir=run_dir, plan_path=plan_path, device=device, summary=summary, end_to_end=e2e,
                          note=note)


def publishable_kernels(summary: dict[str, Any], run_dir: Path, min_speedup: float) -> dict[str, str]:
    """{op_id: best kernel file} for exactly what publish will publish (faster than eager by more than
    min_speedup), so the PR's end-to-end headline describes the kernels the PR brings: a kept starter
    slower than eager (a GEMM at 0.9x cuBLAS) would otherwise drag the measured forward down."""
    return {op_id: str(run_dir / o["best_file"]) for op_id, o in summary.get("ops", {}).items()
            if o.get("best_file") and (run_dir / o["best_file"]).is_file()
            and (o.get("speedup_vs_eager") or 0.0) > min_speedup}


def _end_to_end(model_ref: str, inputs_ref: str | None, plan: Any, run_dir: Path, summary: dict[str, Any],
                dtype: str, device: str, *, min_speedup: float = 1.0) -> tuple[dict[str, Any] | None, str]:
    kernels = publishable_kernels(summary, run_dir, min_speedup)
    if not kernels:
        return None, f"no kept kernel beat eager by more than {min_speedup:.2f}x: nothing to plug in"
    try:
        from autokernel_ci.integrate import end_to_end
    except ImportError as exc:
        return None, f"end-to-end check not available in this version ({exc})"
    result = end_to_end(model_ref, inputs_ref, plan, kernels, dtype=dtype, device=device)
    data = result.to_dict() if hasattr(result, "to_dict") else dict(vars(result))
    return data, ""


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    names = ("example", "agent", "budget_minutes", "max_experiments", "max_usd", "run_dir", "device", "shard",
             "llm_model", "top")
    return {n: getattr(args, n, None) for n in names if getattr(args, n, None) is not None}


def run_main(args: argparse.Namespace) -> int:
    from autokernel_ci.loop.commands import loop_options, run_flag_problem
    from autokernel_ci.publish.commands import render_result, target_from_env
    from autokernel_ci.publish.publisher import PublishError, preview, publish

    repo = Path(getattr(args, "repo", None) or ".").resolve()
    github = bool(getattr(args, "github", False)) or (os.environ.get("GITHUB_ACTIONS") == "true"
                                                      and not getattr(args, "local", False))
    try:
        config = load_config(getattr(args, "config", None), overrides_from_args(args), repo=repo)
        options = loop_options(args)
        problem = run_flag_problem(args, config)
        if problem:
            print(f"autokernel-ci run: stopped before profiling: {problem}", file=sys.stderr)
            return EXIT_USAGE
        result = run_pipeline(config, repo=repo, resume=bool(getattr(args, "resume", False)),
                              loop_options=options)
    except (ConfigError, PipelineError, ValueError) as exc:
        print(f"autokernel-ci run: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except LoopInterrupted as exc:  # a stopped run is not published: its user stopped it
        hint = f"nothing was published; to continue, run the same command again with --resume --run-dir {exc.run_dir}"
        print(f"autokernel-ci run: {exc.describe(hint)}", file=sys.stderr)
        return exc.exit_code
    if result.note:
        print(f"autokernel-ci run: {result.note}", file=sys.stderr)
    print("[4/4] publish", file=sys.stderr, flush=True)
    try:
        from autokernel_ci.publish.git import Git

        if not Git(repo).is_repo():
            pub = preview([result.run_dir], repo, config=config)
            pub.message = f"{repo} is not a git repository: no branch made. {pub.message}".strip()
        else:
            target = target_from_env(os.environ) if github else None
            pub = publish([result.run_dir], repo, mode="github" if github else "local", config=config, github=target)
    except PublishError as exc:
        print(f"autokernel-ci run: publish failed: {exc} (results stay in {result.run_dir})", file=sys.stderr)
        return EXIT_FAILED
    render_result(pub)
    print(f"  run directory: {result.run_dir}")
    return EXIT_OK
