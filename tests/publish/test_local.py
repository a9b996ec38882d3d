"""Local mode: the commit lands on a local branch through plumbing; the user's work is untouched."""

from __future__ import annotations

import hashlib

from ghworld import git
from rundirs import make_run_dir, plan_op

from autokernel_ci.config import Config
from autokernel_ci.publish import publish

BRANCH = "autokernel/nightly"


def _rd(tmp_path, name, speedups):
    ops = [plan_op("rmsnorm-0", "rmsnorm", 0.3, ["model.layers.0.norm"]), plan_op("softmax-0", "softmax", 0.1)]
    return make_run_dir(tmp_path / name, ops, speedups=speedups)


def _index_digest(repo):
    return hashlib.sha256((repo / ".git" / "index").read_bytes()).hexdigest()


def test_local_branch_created_then_unchanged_and_worktree_untouched(tmp_path, model_repo):
    (model_repo / "model.py").write_text("# uncommitted edit\n")
    (model_repo / "staged.txt").write_text("staged\n")
    git(model_repo, "add", "staged.txt")
    status, index = git(model_repo, "status", "--porcelain"), _index_digest(model_repo)
    first = _rd(tmp_path, "r1", {"rmsnorm-0": [1.6]})
    result = publish([first], model_repo)
    assert result.operation == "created" and result.kernels == ["rmsnorm-0"]
    assert git(model_repo, "status", "--porcelain") == status and _index_digest(model_repo) == index
    assert git(model_repo, "symbolic-ref", "HEAD") == "refs/heads/main"
    files = git(model_repo, "ls-tree", "-r", "--name-only", BRANCH).splitlines()
    assert {"autokernels/__init__.py", "autokernels/kernels/rmsnorm-0.py", "autokernels/tests/test_verify.py",
            "autokernels/results.json", "autokernels/report.html", "model.py"} <= set(files)
    assert git(model_repo, "show", f"{BRANCH}:model.py").startswith("import torch")  # committed, not the edit
    # the PR text lies beside the publication, not in the commit, and names the kernel it brings
    body = (model_repo / ".autokernel-ci" / "publication" / "pr_body.md").read_text()
    assert "rmsnorm-0" in body and not any(f.endswith("pr_body.md") for f in files)
    again = publish([first], model_repo)  # the same results: byte-identical publication
    assert again.operation == "unchanged", again.message
    better = publish([_rd(tmp_path, "r2", {"rmsnorm-0": [1.6, 2.2]})], model_repo)
    assert better.operation == "updated" and git(model_repo, "rev-list", "--count", f"main..{BRANCH}") == "1"


def test_human_commit_on_local_bot_branch_is_kept(tmp_path, model_repo):
    assert publish([_rd(tmp_path, "r1", {"rmsnorm-0": [1.6]})], model_repo).operation == "created"
    git(model_repo, "checkout", "-q", BRANCH)
    (model_repo / "mine.txt").write_text("mine\n")
    git(model_repo, "add", "mine.txt")
    git(model_repo, "commit", "-q", "-m", "my change")
    tip = git(model_repo, "rev-parse", "HEAD")
    checked_out = publish([_rd(tmp_path, "r2", {"rmsnorm-0": [1.6, 2.0]})], model_repo)
    assert checked_out.operation == "skipped" and "checked out" in checked_out.message
    git(model_repo, "checkout", "-q", "main")
    result = publish([_rd(tmp_path, "r3", {"rmsnorm-0": [1.6, 2.0]})], model_repo)
    assert result.operation == "skipped" and "Ada Human" in result.message
    assert git(model_repo, "rev-parse", BRANCH) == tip


def test_no_improvement_no_branch_but_a_report(tmp_path, model_repo):
    result = publish([_rd(tmp_path, "r", {"rmsnorm-0": [0.9]})], model_repo, config=Config(min_speedup=1.0))
    assert result.operation == "none" and "nothing to publish" in result.message
    assert git(model_repo, "branch", "--list", BRANCH) == ""
    assert (tmp_path / "workspace" / ".autokernel-ci" / "publication" / "autokernels" / "report.html").is_file()
    assert git(model_repo, "status", "--porcelain") == ""  # .autokernel-ci ignores itself
