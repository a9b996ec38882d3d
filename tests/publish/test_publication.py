"""The publication's files: the enable module runs the kernels with only torch + triton, reports
escape untrusted text, plots are real PNGs, the generated tests are valid pytest modules."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rundirs import make_run_dir, plan_op

from autokernel_ci.publish.merge import improvements, merge_run_dirs
from autokernel_ci.publish.repo_writer import stage
from autokernel_ci.publish.report import Links, code_name, display_model, md_escape, render_markdown

HOSTILE = 'BLOCK={block} @everyone <img src=x onerror=alert(1)> [click](http://evil) | col'


@pytest.fixture
def publication(tmp_path):
    ops = [plan_op("rmsnorm-0", "rmsnorm", 0.3, ["model.layers.0.norm", "model.norm"]),
           plan_op("softmax-0", "softmax", 0.1)]
    rd = make_run_dir(tmp_path / "run", ops, speedups={"rmsnorm-0": [1.5], "softmax-0": [1.3]}, idea_text=HOSTILE,
                      end_to_end={"speedup_vs_eager": 1.21, "passed": True, "eager_ms": 10.0, "ours_ms": 8.26})
    merged = merge_run_dirs([rd])
    published = improvements(merged, 1.0)
    return stage(tmp_path / "pub", merged, published, repo="octo/model", branch="autokernel/nightly",
                 kernels_dir="autokernels", links=Links("https://ghe.example", "octo/model", "autokernel/nightly"),
                 min_speedup=1.0)


class TinyRMSNorm(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, n))
        self.variance_epsilon = 1e-6

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon) * self.weight


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([torch.nn.Module()])
        self.layers[0].norm = TinyRMSNorm(64)
        self.norm = TinyRMSNorm(64)

    def forward(self, x):
        return torch.nn.functional.softmax(self.norm(self.layers[0].norm(x)), dim=-1)


def _import(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available(),
                    reason="Triton kernels need a GPU or TRITON_INTERPRET=1")
def test_enable_patches_the_model_and_matches_eager(publication):
    os.environ["AUTOKERNELS_STANDALONE"] = "1"  # exercise the module's own patcher (torch + triton only)
    try:
        mod = _import(publication.root / "autokernels" / "__init__.py", "autokernels_under_test")
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model = Tiny().to(device)
        x = torch.randn(4, 8, 64, device=device)
        expected = model(x)
        assert mod.enable(model) is model
        calls = []
        real = mod.kernel("rmsnorm-0")
        mod._loaded["rmsnorm-0"] = lambda *a: calls.append(1) or real(*a)
        mod.enable(Tiny())  # re-patching a fresh model picks up the counted kernel
        fresh = Tiny().to(device)
        mod.enable(fresh)
        torch.testing.assert_close(fresh(x), expected, rtol=1e-4, atol=1e-5)
        assert len(calls) == 2  # both norms ran through the kernel
        patched = mod.enable_all()
        try:
            assert patched == ["softmax", "rms_norm"] or "softmax" in patched
            y = torch.randn(5, 33, device=device)
            torch.testing.assert_close(torch.nn.functional.softmax(y, dim=-1), torch.softmax(y, dim=-1))
        finally:
            mod.disable()
        assert torch.nn.functional.softmax.__module__ == "torch.nn.functional"
    finally:
        os.environ.pop("AUTOKERNELS_STANDALONE", None)


def test_enable_module_imports_nothing_beyond_torch_and_triton(publication):
    tree = ast.parse((publication.root / "autokernels" / "__init__.py").read_text())
    top = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            top |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            top.add(node.module.split(".")[0])
    # autokernel_ci is imported only inside a try/except ImportError (optional richer patcher)
    assert top <= {"__future__", "importlib", "os", "pathlib", "torch", "json", "autokernel_ci"}


def test_reports_escape_untrusted_text(publication):
    html = (publication.root / "autokernels" / "report.html").read_text()
    assert "<img src=x" not in html and "&lt;img src=x" in html
    body = render_markdown("pr_body.md.j2", publication.context)
    assert "@everyone" not in body.replace("\\@everyone", "") and "<img" not in body
    assert "https://ghe.example/octo/model/blob/autokernel/nightly/autokernels/report/roofline.png?raw=true" in body
    assert "1.21x" in body  # the end-to-end headline
    assert md_escape("a|b [x](y) <b>") == "a\\|b \\[x\\]\\(y\\) \\<b\\>"


@pytest.mark.parametrize(("name", "shown"), [
    ("rotary_embedding-0", "rotary_embedding-0"),                  # printed as is inside ``` blocks
    ("x```\nrm -rf ~ #", "x____rm_-rf____"),                       # cannot close the block or add a line
])
def test_code_names_stay_inside_their_code_block(name, shown):
    assert str(code_name(name)) == shown


def test_model_paths_are_shown_relative_never_the_runners_absolute_path(tmp_path):
    repo = tmp_path / "repo"
    assert display_model(f"{repo}/models/net.py:build(size=1)", repo) == "models/net.py:build(size=1)"
    assert display_model("models/net.py:build", repo) == "models/net.py:build"
    assert display_model("/opt/runner/_work/x/y/net.py:build", repo) == "net.py:build"


def test_plots_and_results_are_written(publication):
    for name in ("progress.png", "speedup.png", "roofline.png"):
        assert (publication.root / "autokernels" / "report" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    results = json.loads((publication.root / "autokernels" / "results.json").read_text())
    assert results["version"] == 1 and [k["op_id"] for k in results["kernels"]] == ["rmsnorm-0", "softmax-0"]
    assert all(not k["run_dir"].startswith("/") for k in results["kernels"])


@pytest.mark.slow
def test_generated_tests_run_the_five_stages_with_plain_pytest(publication):
    tests = publication.root / "autokernels" / "tests"
    env = {**os.environ, "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "1")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore",
                           str(tests / "test_verify.py"), "--collect-only"], capture_output=True, text=True,
                          timeout=300, cwd=publication.root, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = [line for line in proc.stdout.splitlines() if "::test_stage[" in line]
    assert len(ids) == 2 * 5 and any("rmsnorm-0" in i and "determinism" in i for i in ids)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore",
                           str(tests / "test_verify.py"), "-k", "rmsnorm"], capture_output=True, text=True,
                          timeout=300, cwd=publication.root, env=env)
    assert proc.returncode == 0 and "5 passed" in proc.stdout, proc.stdout + proc.stderr
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore",
                           str(tests / "test_bench.py"), "--benchmark-disable"], capture_output=True, text=True,
                          timeout=300, cwd=publication.root, env=env)
    assert proc.returncode == 0 and "4 passed" in proc.stdout, proc.stdout + proc.stderr
