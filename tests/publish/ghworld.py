"""Shared fixtures of the publish and action tests (imported by both conftest.py files): a model
repository with a bare remote served over git's smart HTTP protocol, a GitHub REST API on
127.0.0.1, and run directories on disk."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fakes import GitHubAPI, GitServer  # noqa: E402

# Shaped like a GitHub installation token, unique enough to grep for in every file and log.
TOKEN = "ghs_TESTtoken0123456789abcdefABCDEF0123"
REPO = "octo/model"


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    full_env = {**os.environ, "GIT_AUTHOR_NAME": "Ada Human", "GIT_AUTHOR_EMAIL": "ada@example.com",
                "GIT_COMMITTER_NAME": "Ada Human", "GIT_COMMITTER_EMAIL": "ada@example.com", **(env or {})}
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True,
                          env=full_env).stdout.strip()


@pytest.fixture
def model_repo(tmp_path: Path) -> Path:
    """A user's model repository with one commit on main."""
    repo = tmp_path / "workspace"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "model.py").write_text("import torch\n\n\ndef build_model():\n    return torch.nn.Linear(4, 4)\n")
    (repo / "README.md").write_text("my model\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial model")
    return repo


class GitHubWorld:
    """The remote side: bare repository behind the git HTTP server, plus the REST API."""

    def __init__(self, tmp: Path, workspace: Path, gitserver: GitServer, api: GitHubAPI) -> None:
        self.tmp, self.workspace, self.gitserver, self.api = tmp, workspace, gitserver, api
        self.bare = gitserver.root / f"{REPO}.git"

    def env(self, event_name: str, event_path: Path, **inputs: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "AUTOKERNEL_INPUT_"))}
        env.update({
            "GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": event_name, "GITHUB_EVENT_PATH": str(event_path),
            "GITHUB_REPOSITORY": REPO, "GITHUB_WORKSPACE": str(self.workspace),
            "GITHUB_OUTPUT": str(self.tmp / "github_output"), "GITHUB_STEP_SUMMARY": str(self.tmp / "summary.md"),
            "GITHUB_API_URL": self.api.url, "GITHUB_SERVER_URL": self.gitserver.url,
            "AUTOKERNEL_INPUT_GITHUB_TOKEN": TOKEN, "AUTOKERNEL_GITHUB_WRITE_SPACING_S": "0",
            "AUTOKERNEL_GITHUB_READ_SPACING_S": "0", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        })
        for name, value in inputs.items():
            env["AUTOKERNEL_INPUT_" + name.upper()] = value
        return env

    def outputs(self) -> dict[str, str]:
        path = self.tmp / "github_output"
        out: dict[str, str] = {}
        if not path.exists():
            return out
        lines = path.read_text().splitlines()
        i = 0
        while i < len(lines):
            name, _, delim = lines[i].partition("<<")
            j = lines.index(delim, i + 1)
            out[name] = "\n".join(lines[i + 1:j])
            i = j + 1
        return out

    def remote_sha(self, ref: str) -> str | None:
        try:
            return git(self.bare, "rev-parse", "-q", "--verify", ref)
        except subprocess.CalledProcessError:
            return None


@pytest.fixture
def world(tmp_path: Path, model_repo: Path):
    root = tmp_path / "srv"
    bare = root / f"{REPO}.git"
    bare.parent.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    git(model_repo, "push", "-q", str(bare), "main:main")
    with GitServer(root, TOKEN) as gs, GitHubAPI(REPO, TOKEN) as api:
        yield GitHubWorld(tmp_path, model_repo, gs, api)


def files_containing(root: Path, needle: str) -> list[Path]:
    hits = []
    for p in root.rglob("*"):
        if p.is_file():
            try:
                if needle.encode() in p.read_bytes():
                    hits.append(p)
            except OSError:
                continue
    return hits
