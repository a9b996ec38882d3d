"""`autokernel-ci run`: example resolution, config errors, and the whole pipeline on CPU."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autokernel_ci.config import Config, ConfigError
from autokernel_ci.pipeline import (
    EXAMPLES,
    _anchor,
    example_file,
    example_refs,
    publishable_kernels,
    run_main,
    run_pipeline,
)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_examples_resolve_to_a_sized_model(name, device):
    model_ref, inputs_ref = example_refs(name, device)
    size = EXAMPLES[name][1][device]
    assert example_file(name).is_file()
    assert model_ref.endswith(f'build_model(size="{size}")') and inputs_ref.endswith(f'example_inputs(size="{size}")')


def test_unknown_example_and_missing_model_are_named(tmp_path):
    with pytest.raises(ConfigError, match="unknown example 'mistral'"):
        example_file("mistral")
    with pytest.raises(ConfigError, match="no model to optimise"):
        run_pipeline(Config(device="cpu"), repo=tmp_path)


def test_config_paths_are_relative_to_the_repository(tmp_path):
    assert _anchor("models/m.py:build(size='x')", tmp_path) == f"{tmp_path.as_posix()}/models/m.py:build(size='x')"
    assert _anchor("/abs/m.py:f", tmp_path) == "/abs/m.py:f"


def test_end_to_end_plugs_in_only_what_publish_publishes(tmp_path):
    (tmp_path / "best").mkdir()
    for op in ("rmsnorm-0", "matmul-0", "softmax-0"):
        (tmp_path / "best" / f"{op}.py").write_text("# kernel\n")
    summary = {"ops": {
        "rmsnorm-0": {"best_file": "best/rmsnorm-0.py", "speedup_vs_eager": 11.9},
        "matmul-0": {"best_file": "best/matmul-0.py", "speedup_vs_eager": 0.9},   # kept starter, slower than cuBLAS
        "softmax-0": {"best_file": "best/softmax-0.py", "speedup_vs_eager": 1.02},
        "rotary-0": {"best_file": "best/missing.py", "speedup_vs_eager": 7.0},    # file gone: not plugged in
        "reduce-0": {"best_file": None, "speedup_vs_eager": None},               # failed op
    }}
    assert set(publishable_kernels(summary, tmp_path, 1.0)) == {"rmsnorm-0", "softmax-0"}
    assert set(publishable_kernels(summary, tmp_path, 1.05)) == {"rmsnorm-0"}  # the config's min_speedup


def test_run_main_reports_a_config_error_as_usage(tmp_path, capsys):
    args = argparse.Namespace(config=str(tmp_path / "missing.yml"), example=None, local=True)
    assert run_main(args) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.slow
def test_run_example_llama_local_end_to_end(tmp_path):
    """The README's first command, on CPU: profile -> optimize -> end to end -> local publish."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "init"]):
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@e", *args], check=True)
    (repo / ".github").mkdir()
    (repo / ".github" / "autokernel.yml").write_text("top: 1\n")  # one target keeps the CPU run short
    # a fresh user's environment: no GitHub, no profiler level (in-process profiles of other tests set one)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_") and k != "KINETO_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-m", "autokernel_ci", "run", "--example", "llama", "--local",
                           "--device", "cpu", "--max-experiments", "1", "--budget-minutes", "3"],
                          cwd=repo, env=env, capture_output=True, text=True, timeout=420)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "| vs compile |" in out and "–x" not in out  # the summary table: an untimed compile is a bare dash
    assert "profiler_start" not in out  # torch's profiler log stays off (torch_profile.PROFILER_LOG_ENV)
    runs = list((repo / ".autokernel-ci" / "runs").iterdir())
    assert len(runs) == 1 and (runs[0] / "plan.json").is_file() and (runs[0] / "journal.jsonl").is_file()
    assert "publish (local):" in out and Path(repo / ".autokernel-ci" / "publication" / "autokernels" /
                                              "report.html").is_file()
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True)
    assert status.stdout == "?? .github/\n"  # the run leaves nothing else behind (.autokernel-ci ignores itself)
