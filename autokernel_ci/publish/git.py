"""git through subprocess argument lists (never a shell), with the token kept out of sight.

The token reaches git only through the child's environment as an `http.<server>/.extraheader`
(GIT_CONFIG_COUNT/KEY/VALUE, git >= 2.31): never on the command line (visible in `ps`), never in
a URL (echoed in errors), never in .git/config. Commits are made with plumbing (a temporary index,
write-tree, commit-tree, update-ref), so the user's working tree, index and current branch are
never touched, locally or on a runner.
"""

from __future__ import annotations

import base64
import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ZERO_SHA = "0" * 40
TRAILER = "Autokernel-CI-Run"
# variables that must not reach git (hooks and credential helpers see the environment)
SECRET_ENV = ("GITHUB_TOKEN", "GH_TOKEN", "AUTOKERNEL_INPUT_GITHUB_TOKEN", "INPUT_GITHUB-TOKEN")
GIT_TIMEOUT_S = 300  # a push of a few hundred kB over a slow runner link; anything longer is a hang


class GitError(RuntimeError):
    pass


@dataclass(frozen=True)
class Identity:
    name: str
    email: str


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    author: Identity
    committer: Identity
    message: str

    def made_by(self, bot: Identity) -> bool:
        return self.author == bot and self.committer == bot and f"\n{TRAILER}:" in "\n" + self.message


def auth_env(server_url: str, token: str) -> dict[str, str]:
    """Environment that makes git send the token to `server_url` only (as actions/checkout does)."""
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    key = f"http.{server_url.rstrip('/')}/.extraheader"
    return {
        "GIT_CONFIG_COUNT": "2",
        # an empty value first resets headers a checkout may have persisted for the same server
        "GIT_CONFIG_KEY_0": key, "GIT_CONFIG_VALUE_0": "",
        "GIT_CONFIG_KEY_1": key, "GIT_CONFIG_VALUE_1": f"AUTHORIZATION: basic {basic}",
    }


class Git:
    def __init__(self, repo: str | Path, *, server_url: str | None = None, token: str | None = None) -> None:
        self.repo = Path(repo)
        self.server_url = server_url.rstrip("/") if server_url else None
        self._token = token

    # -- running ------------------------------------------------------------------------------
    def _env(self, network: bool, extra: Mapping[str, str] | None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV and not k.startswith("GIT_CONFIG_")}
        env.update(GIT_TERMINAL_PROMPT="0", GCM_INTERACTIVE="never", LC_ALL="C")
        if network and self._token and self.server_url:
            env.update(auth_env(self.server_url, self._token))
        if extra:
            env.update(extra)
        return env

    def run(self, *args: str, stdin: str | None = None, network: bool = False, check: bool = True,
            env: Mapping[str, str] | None = None) -> str:
        cmd = ["git", "-C", str(self.repo), *args]
        try:
            proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, env=self._env(network, env),
                                  timeout=GIT_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise GitError(f"git {args[0]} took over {GIT_TIMEOUT_S} s and was stopped") from None
        if check and proc.returncode != 0:
            raise GitError(f"git {' '.join(self._redact(args))} failed ({proc.returncode}): "
                           f"{self._redact_text(proc.stderr.strip() or proc.stdout.strip())}")
        return proc.stdout

    def _redact_text(self, text: str) -> str:
        return text.replace(self._token, "***") if self._token else text

    def _redact(self, args: Sequence[str]) -> list[str]:
        return [self._redact_text(a) for a in args]

    # -- reading ------------------------------------------------------------------------------
    def rev_parse(self, ref: str) -> str | None:
        out = self.run("rev-parse", "-q", "--verify", f"{ref}^{{commit}}", check=False).strip()
        return out or None

    def tree_of(self, commit: str) -> str:
        return self.run("rev-parse", f"{commit}^{{tree}}").strip()

    def is_repo(self) -> bool:
        return self.run("rev-parse", "--git-dir", check=False).strip() != ""

    def current_branch_ref(self) -> str | None:
        return self.run("symbolic-ref", "-q", "HEAD", check=False).strip() or None

    def commits(self, tip: str, exclude: str | None) -> list[CommitInfo]:
        """Commits reachable from `tip` but not from `exclude`, newest first."""
        sep, end = "\x1f", "\x1e"
        fmt = sep.join(["%H", "%an", "%ae", "%cn", "%ce", "%B"]) + end
        args = ["log", f"--format={fmt}", tip] + ([f"^{exclude}"] if exclude else [])
        out = self.run(*args)
        result = []
        for chunk in out.split(end):
            chunk = chunk.strip("\n")
            if not chunk:
                continue
            sha, an, ae, cn, ce, msg = chunk.split(sep, 5)
            result.append(CommitInfo(sha, Identity(an, ae), Identity(cn, ce), msg))
        return result

    def show(self, commit: str, path: str) -> str | None:
        out = subprocess.run(["git", "-C", str(self.repo), "show", f"{commit}:{path}"], capture_output=True,
                             text=True, env=self._env(False, None), check=False)
        return out.stdout if out.returncode == 0 else None

    def changed_files(self, base: str, head: str) -> list[str]:
        return [p for p in self.run("diff", "--name-only", "-z", f"{base}...{head}").split("\0") if p]

    # -- writing (plumbing only) --------------------------------------------------------------------
    def build_tree(self, base_commit: str | None, prefix: str, staging_root: Path) -> str:
        """The tree of `base_commit` with `prefix/` replaced by the files under staging_root/prefix."""
        files = sorted(p for p in (staging_root / prefix).rglob("*") if p.is_file())
        with tempfile.TemporaryDirectory(prefix="autokernel-index-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            if base_commit:
                self.run("read-tree", base_commit, env=env)
            else:
                self.run("read-tree", "--empty", env=env)
            old = [p for p in self.run("ls-files", "-z", "--", prefix, env=env).split("\0") if p]
            lines = [f"0 {ZERO_SHA}\t{p}" for p in old]
            if files:
                shas = self.run("hash-object", "-w", "--no-filters", "--stdin-paths",
                                stdin="".join(f"{p}\n" for p in files)).split()
                for path, sha in zip(files, shas, strict=True):
                    mode = "100755" if os.access(path, os.X_OK) else "100644"
                    lines.append(f"{mode} {sha}\t{path.relative_to(staging_root).as_posix()}")
            if lines:
                self.run("update-index", "--index-info", stdin="".join(f"{ln}\n" for ln in lines), env=env)
            return self.run("write-tree", env=env).strip()

    def commit_tree(self, tree: str, parents: Sequence[str], message: str, identity: Identity) -> str:
        env = {"GIT_AUTHOR_NAME": identity.name, "GIT_AUTHOR_EMAIL": identity.email,
               "GIT_COMMITTER_NAME": identity.name, "GIT_COMMITTER_EMAIL": identity.email}
        args = ["commit-tree", tree]
        for p in parents:
            args += ["-p", p]
        return self.run(*args, stdin=message, env=env).strip()

    def update_ref(self, ref: str, new: str, old: str | None) -> None:
        self.run("update-ref", "-m", "autokernel-ci publish", ref, new, old or ZERO_SHA)

    # -- remote -------------------------------------------------------------------------------
    def remote_url(self, repo_full_name: str) -> str:
        if not self.server_url:
            raise GitError("no server URL: set GITHUB_SERVER_URL (e.g. https://github.com)")
        return f"{self.server_url}/{repo_full_name}.git"

    def ls_remote(self, url: str, ref: str) -> str | None:
        out = self.run("ls-remote", url, ref, network=True).split()
        return out[0] if out else None

    def fetch(self, url: str, ref: str) -> str:
        """Fetch one ref into FETCH_HEAD (no remote or branch is configured); return its commit."""
        self.run("fetch", "--no-tags", "--quiet", url, ref, network=True)
        sha = self.rev_parse("FETCH_HEAD")
        if not sha:
            raise GitError(f"fetched {ref} but FETCH_HEAD is empty")
        return sha

    def push(self, url: str, sha: str, branch: str, expected_old: str | None) -> None:
        lease = f"--force-with-lease=refs/heads/{branch}:{expected_old or ''}"
        self.run("push", "--no-verify", "--quiet", lease, url, f"{sha}:refs/heads/{branch}", network=True)
