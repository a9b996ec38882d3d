"""The console entry point: every command of DESIGN.md §10 answers --help (without importing torch), bad flag
values are named with their fix, and every flag reaches its consumer (real subprocesses where cheap)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autokernel_ci.cli import HANDLERS, main

COMMANDS = ["profile", "verify", "bench", "optimize", "run", "publish", "action", "gpu"]


def test_every_design_command_is_declared():
    assert set(COMMANDS) == set(HANDLERS)


@pytest.mark.parametrize("command", COMMANDS)
def test_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert f"autokernel-ci {command}" in capsys.readouterr().out


def test_python_dash_m_and_no_command_exit_2():
    proc = subprocess.run([sys.executable, "-m", "autokernel_ci"], capture_output=True, text=True)
    assert proc.returncode == 2 and "COMMAND" in proc.stdout


def test_bad_argument_is_a_usage_error():
    proc = subprocess.run([sys.executable, "-m", "autokernel_ci", "optimize"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--plan" in proc.stderr


# -- --help stays light -----------------------------------------------------------------------------
HEAVY = ("torch", "litellm", "triton", "github")
_HELP_PROBE = """
import sys
from autokernel_ci.cli import main
for argv in ([], *[[c] for c in sys.argv[1:]]):
    try:
        main([*argv, "--help"])
    except SystemExit:
        pass
print("HEAVY:" + ",".join(m for m in {heavy!r} if m in sys.modules))
"""


def test_help_of_every_command_imports_no_torch_or_litellm():
    proc = subprocess.run([sys.executable, "-c", _HELP_PROBE.format(heavy=HEAVY), *COMMANDS],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("HEAVY:"), proc.stdout[-500:]


NEW_FLAGS = {
    "optimize": ["--workers", "--seed", "--patience", "--verify-shapes", "--timeout", "--quiet", "--verify-every",
                 "--confirm-pairs", "--max-usd", "--llm-model", "--resume", "--budget-minutes", "--max-experiments",
                 "--agent"],
    "run": ["--github", "--local", "--top", "--max-usd", "--llm-model", "--resume", "--repo", "--workers", "--seed",
            "--patience", "--verify-shapes", "--timeout", "--quiet", "--verify-every", "--confirm-pairs", "--run-dir",
            "--config", "--example"],
    "publish": ["--config", "--json", "--repo", "--local", "--github"],
    "verify": ["--dtypes", "--shapes", "--seed", "--timeout"],
    "bench": ["--dtypes", "--no-compile"],
    "gpu": ["--calibrate", "--json"],
}


@pytest.mark.parametrize("command", sorted(NEW_FLAGS))
def test_help_lists_the_flags(command):
    proc = subprocess.run([sys.executable, "-m", "autokernel_ci", command, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    missing = [f for f in NEW_FLAGS[command] if f not in proc.stdout]
    assert not missing, proc.stdout


# -- bad values: the error names the value and the fix, before anything heavy runs ---------------------
@pytest.mark.parametrize(("argv", "expected"), [
    (["verify", "k.py", "--dtypes", "fp64"], ["'fp64'", "bf16, fp16, fp32", "--dtypes bf16,fp32"]),
    (["verify", "k.py", "--dtypes", "bf16,int8"], ["'int8'", "bf16, fp16, fp32"]),
    (["bench", "k.py", "--dtypes", "fp8"], ["'fp8'", "bf16, fp16, fp32"]),
    (["optimize", "--plan", "p.json", "--run-dir", "r", "--workers", "0"], ["--workers", "0", "at least 1"]),
    (["optimize", "--plan", "p.json", "--run-dir", "r", "--max-usd", "-1"], ["--max-usd", "-1", "--max-usd 5"]),
    (["optimize", "--plan", "p.json", "--run-dir", "r", "--budget-minutes", "soon"], ["'soon'", "--budget-minutes"]),
    (["optimize", "--plan", "p.json", "--run-dir", "r", "--timeout", "0"], ["--timeout", "above 0"]),
    (["optimize", "--plan", "p.json", "--run-dir", "r", "--confirm-pairs", "-1"],
     ["--confirm-pairs", "-1", "at least 0", "--confirm-pairs 2"]),
    (["run", "--top", "0"], ["--top", "0", "at least 1"]),
    (["run", "--repo", "/no/such/dir"], ["/no/such/dir", "--repo ."]),
    (["run", "--local", "--github"], ["--github", "--local"]),
    (["publish", "rd", "--repo", "/no/such/dir"], ["/no/such/dir", "not a directory"]),
])
def test_bad_flag_values_are_named_with_the_fix(argv, expected):
    proc = subprocess.run([sys.executable, "-m", "autokernel_ci", *argv], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    for text in expected:
        assert text in proc.stderr, proc.stderr


def test_dtypes_are_normalised():
    from autokernel_ci.cli import parse_dtypes

    assert parse_dtypes("bf16, float32,fp32") == ["bf16", "fp32"]


# -- each flag reaches its consumer -----------------------------------------------------------------
def _plan(tmp_path):
    from autokernel_ci.plan import Plan, PlanOp

    op = PlanOp(id="rmsnorm-0", kernel_type="rmsnorm", name="rmsnorm", shapes=[{"M": 16, "N": 256}], dtype="fp32",
                calls=1, time_us=30.0, share=0.3, bound="memory", floor_us=None, amdahl_gain=1.2)
    path = tmp_path / "plan.json"
    Plan(model="model.py:build", dtype="fp32", device="cpu", ops=[op]).save(path)
    return path


def _cli(*argv, cwd=None, env=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "autokernel_ci", *argv], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=timeout)


def test_optimize_max_usd_zero_stops_at_once_and_says_why(tmp_path):
    proc = _cli("optimize", "--plan", str(_plan(tmp_path)), "--run-dir", str(tmp_path / "run"), "--device", "cpu",
                "--max-usd", "0")
    assert proc.returncode == 2
    assert "--max-usd 0 allows no spend" in proc.stderr and "leave it out" in proc.stderr
    assert not (tmp_path / "run").exists()  # stopped before the baselines


def test_optimize_llm_model_without_llm_agent_is_refused(tmp_path):
    proc = _cli("optimize", "--plan", str(_plan(tmp_path)), "--run-dir", str(tmp_path / "run"), "--device", "cpu",
                "--llm-model", "openai/gpt-4o")
    assert proc.returncode == 2 and "--llm-model openai/gpt-4o" in proc.stderr and "--agent llm" in proc.stderr


class _Reached(Exception):
    pass


def test_optimize_flags_reach_the_loop_settings(tmp_path, monkeypatch):
    import autokernel_ci.loop.commands as loop_commands

    seen = {}

    def fake_optimize(plan, run_dir, settings, *, resume=False):
        seen.update(settings=settings, run_dir=run_dir, resume=resume, ops=[o.id for o in plan.targets()])
        raise _Reached

    monkeypatch.setattr(loop_commands, "optimize", fake_optimize)
    with pytest.raises(_Reached):
        main(["optimize", "--plan", str(_plan(tmp_path)), "--run-dir", str(tmp_path / "run"), "--device", "cpu",
              "--budget-minutes", "7", "--max-experiments", "3", "--max-usd", "2.5", "--workers", "2", "--seed", "11",
              "--patience", "4", "--verify-shapes", "cpu, edge", "--timeout", "90", "--quiet", "--resume",
              "--shard", "1/1", "--verify-every", "--confirm-pairs", "0"])
    s = seen["settings"]
    assert s.confirm_pairs == 0  # keeps on the first timing
    assert (s.budget.minutes, s.budget.experiments, s.budget.usd) == (7.0, 3, 2.5)
    assert (s.workers, s.seed, s.patience, s.timeout_s, s.quiet) == (2, 11, 4, 90.0, True)
    assert s.screen is False  # --verify-every: every candidate verified before it is timed
    assert s.verify_shape_sets == ("cpu", "edge") and s.device == "cpu" and s.shard == "1/1"
    assert seen["resume"] is True and seen["ops"] == ["rmsnorm-0"]


def _fake_pipeline(monkeypatch, seen):
    """run_pipeline for real, with the profile and the loop replaced by recorders."""
    import autokernel_ci.loop as loop_pkg
    import autokernel_ci.profiling.commands as profiling

    def fake_profile(model_ref, inputs_ref=None, *, dtype="bf16", device=None, top=None):
        seen["top"] = top
        from autokernel_ci.plan import Plan

        return Plan(model=model_ref, dtype="fp32", device="cpu", ops=[])

    def fake_optimize(plan, run_dir, settings, *, resume=False):
        seen.update(settings=settings, run_dir=run_dir, resume=resume)
        raise _Reached

    monkeypatch.setattr(profiling, "profile_model", fake_profile)
    monkeypatch.setattr(loop_pkg, "optimize", fake_optimize)
    monkeypatch.setenv("AUTOKERNEL_LLM_MODEL", "unused")  # run_pipeline setdefaults it for --agent llm


def test_run_flags_reach_the_pipeline_and_the_loop(tmp_path, monkeypatch):
    import autokernel_ci.loop as loop_pkg

    original = loop_pkg.LoopSettings
    seen: dict = {}
    _fake_pipeline(monkeypatch, seen)
    repo = tmp_path / "repo"
    repo.mkdir()
    with pytest.raises(_Reached):
        main(["run", "--example", "llama", "--repo", str(repo), "--device", "cpu", "--top", "2", "--agent", "llm",
              "--llm-model", "openai/gpt-4o", "--max-usd", "1.5", "--budget-minutes", "4", "--max-experiments", "5",
              "--run-dir", "runs/a", "--workers", "3", "--seed", "5", "--patience", "2", "--verify-shapes", "cpu",
              "--timeout", "60", "--quiet"])
    s = seen["settings"]
    assert seen["top"] == 2 and seen["run_dir"] == repo.resolve() / "runs" / "a" and seen["resume"] is False
    assert (s.agent, s.llm_model, s.device) == ("llm", "openai/gpt-4o", "cpu")
    assert (s.budget.minutes, s.budget.experiments, s.budget.usd) == (4.0, 5, 1.5)
    assert (s.workers, s.seed, s.patience, s.timeout_s, s.verify_shape_sets, s.quiet) == (3, 5, 2, 60.0, ("cpu",),
                                                                                           True)
    assert s.screen is True  # without --verify-every, search candidates are timed first
    assert s.confirm_pairs == 2  # without --confirm-pairs, a keep is re-timed in turn twice
    assert loop_pkg.LoopSettings is original  # the hand-over is undone after the run


def test_run_resume_reuses_the_plan_of_run_dir(tmp_path, monkeypatch):
    seen: dict = {}
    _fake_pipeline(monkeypatch, seen)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _plan(run_dir)  # run/plan.json: profiling is skipped
    with pytest.raises(_Reached):
        main(["run", "--example", "llama", "--repo", str(tmp_path), "--device", "cpu", "--run-dir", str(run_dir),
              "--resume"])
    assert seen["resume"] is True and "top" not in seen and seen["run_dir"] == run_dir


def test_run_resume_without_run_dir_and_zero_usd_stop_before_profiling(tmp_path):
    proc = _cli("run", "--example", "llama", "--repo", str(tmp_path), "--resume")
    assert proc.returncode == 2 and "--run-dir DIR" in proc.stderr
    proc = _cli("run", "--example", "llama", "--repo", str(tmp_path), "--max-usd", "0")
    assert proc.returncode == 2 and "--max-usd 0" in proc.stderr and "allows no spend" in proc.stderr
    assert not (tmp_path / ".autokernel-ci").exists()


def test_run_github_publishes_through_github(tmp_path, monkeypatch, capsys):
    """--github reaches the publish step: outside Actions it asks for GITHUB_REPOSITORY, never pushes."""
    import autokernel_ci.pipeline as pipeline

    for name in ("GITHUB_REPOSITORY", "GITHUB_TOKEN", "GITHUB_ACTIONS"):
        monkeypatch.delenv(name, raising=False)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    result = pipeline.PipelineResult(run_dir=tmp_path / "run", plan_path=tmp_path / "run" / "plan.json", device="cpu",
                                     summary={"ops": {}}, end_to_end=None)
    monkeypatch.setattr(pipeline, "run_pipeline", lambda config, **kw: result)
    assert main(["run", "--example", "llama", "--repo", str(tmp_path), "--github"]) == 1
    assert "GITHUB_REPOSITORY is not set" in capsys.readouterr().err


def test_publish_config_and_json(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parent / "publish"))
    try:
        from ghworld import git
        from rundirs import make_run_dir, plan_op
    finally:
        sys.path.pop(0)
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "model.py").write_text("import torch\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "model")
    run = make_run_dir(tmp_path / "run", [plan_op("rmsnorm-0", "rmsnorm", 0.3)], speedups={"rmsnorm-0": [1.5]})
    config = tmp_path / "ak.yml"
    config.write_text("branch: bots/kernels\nkernels_dir: fast\n")
    out = tmp_path / "out.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    proc = _cli("publish", str(run), "--local", "--repo", str(repo), "--config", str(config), "--json", str(out),
                env=env)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["operation"] == "created" and data["mode"] == "local"
    files = git(repo, "ls-tree", "-r", "--name-only", "bots/kernels").splitlines()
    assert "fast/kernels/rmsnorm-0.py" in files
    proc = _cli("publish", str(run), "--repo", str(repo), "--config", str(tmp_path / "missing.yml"), env=env)
    assert proc.returncode == 2 and "missing.yml does not exist" in proc.stderr


def test_publish_github_outside_actions_names_what_is_missing(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    sys.path.insert(0, str(Path(__file__).resolve().parent / "publish"))
    try:
        from rundirs import make_run_dir, plan_op
    finally:
        sys.path.pop(0)
    run = make_run_dir(tmp_path / "run", [plan_op("rmsnorm-0", "rmsnorm", 0.3)], speedups={"rmsnorm-0": [1.5]})
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    proc = _cli("publish", str(run), "--github", "--repo", str(tmp_path / "repo"), env=env)
    assert proc.returncode == 1 and "GITHUB_REPOSITORY is not set" in proc.stderr


def test_verify_dtypes_reach_the_harness(tmp_path):
    kernel = Path(__file__).resolve().parents[1] / "kernels" / "triton" / "reduce.py"
    out = tmp_path / "v.json"
    proc = _cli("verify", str(kernel), "--device", "cpu", "--dtypes", "fp32", "--json", str(out), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cases = {s["name"]: s["cases"] for s in json.loads(out.read_text())["stages"]}
    assert cases["numerical_stability"] == 1 and cases["determinism"] == 1  # one dtype, not three


def test_bench_dtypes_reach_the_harness(tmp_path, monkeypatch):
    import autokernel_ci.harness.evaluator as evaluator

    seen = {}

    def fake_bench(kernel, **kw):
        seen.update(kw)
        raise _Reached

    monkeypatch.setattr(evaluator, "bench", fake_bench)
    kernel = Path(__file__).resolve().parents[1] / "kernels" / "triton" / "reduce.py"
    with pytest.raises(_Reached):
        main(["bench", str(kernel), "--device", "cpu", "--dtypes", "bf16,fp16", "--no-compile"])
    assert seen["dtypes"] == ["bf16", "fp16"] and seen["compile_baseline"] is False

