"""The GitHub REST calls the bot makes, through PyGithub, sent to GITHUB_API_URL (github.com or an
Enterprise Server: never a hard-coded host).

Small on purpose: find/create/update the one bot PR, upsert the one comment (found by its hidden
marker), react, read a collaborator's permission, read a PR. Results are plain dataclasses so the
callers never hold PyGithub objects.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_API_URL = "https://api.github.com"
# GitHub asks integrations to space content-creating requests (~1 s) to stay clear of the secondary
# rate limit; a publish makes at most ~4 writes. The env override exists for local test servers.
WRITE_SPACING_S, READ_SPACING_S = 1.0, 0.25
SPACING_ENV = ("AUTOKERNEL_GITHUB_WRITE_SPACING_S", "AUTOKERNEL_GITHUB_READ_SPACING_S")
TIMEOUT_S = 30
WRITE_PERMISSIONS = ("admin", "maintain", "write")


class GitHubError(RuntimeError):
    pass


@dataclass
class PullInfo:
    number: int
    url: str  # html_url
    body: str
    head_ref: str
    head_sha: str
    head_repo: str | None  # owner/name of the head repository (None: deleted fork)
    base_ref: str
    base_repo: str
    state: str


@dataclass
class CommentInfo:
    id: int
    url: str
    body: str


def _pull_info(pr) -> PullInfo:
    head_repo = pr.head.repo.full_name if pr.head.repo is not None else None
    return PullInfo(number=pr.number, url=pr.html_url, body=pr.body or "", head_ref=pr.head.ref,
                    head_sha=pr.head.sha, head_repo=head_repo, base_ref=pr.base.ref,
                    base_repo=pr.base.repo.full_name, state=pr.state)


class GitHubClient:
    def __init__(self, token: str, repo: str, api_url: str | None = None) -> None:
        if not token:
            raise GitHubError("no GitHub token: pass the github-token input or set GITHUB_TOKEN")
        if repo.count("/") != 1:
            raise GitHubError(f"repository {repo!r} is not owner/name (GITHUB_REPOSITORY)")
        self.repo_name = repo
        self.owner = repo.split("/")[0]
        # Imported here: local mode (and `run --local` on a runner) never needs PyGithub.
        try:
            from github import Auth, Github
        except ImportError as exc:
            raise GitHubError(f"GitHub mode needs PyGithub, which does not import ({exc}): "
                              "pip install 'PyGithub>=2.1' (or publish with --local)") from None

        self._gh = Github(auth=Auth.Token(token), base_url=(api_url or DEFAULT_API_URL).rstrip("/"),
                          timeout=TIMEOUT_S, lazy=True,
                          seconds_between_requests=float(os.environ.get(SPACING_ENV[1], READ_SPACING_S)),
                          seconds_between_writes=float(os.environ.get(SPACING_ENV[0], WRITE_SPACING_S)),
                          user_agent="autokernel-ci")
        self._repo = self._gh.get_repo(repo)

    def _call(self, what: str, fn, *args, **kwargs):
        from github import GithubException

        try:
            return fn(*args, **kwargs)
        except GithubException as exc:
            message = exc.data.get("message") if isinstance(exc.data, dict) else exc.data
            raise GitHubError(f"GitHub API: {what} failed with {exc.status}: {message}") from None

    # -- repository ---------------------------------------------------------------------------
    def default_branch(self) -> str:
        return self._call("GET repository", lambda: self._repo.default_branch)

    def permission(self, user: str) -> str:
        return self._call(f"read permission of {user}", self._repo.get_collaborator_permission, user)

    def can_write(self, user: str) -> bool:
        return self.permission(user) in WRITE_PERMISSIONS

    # -- pull requests ------------------------------------------------------------------------
    def get_pull(self, number: int) -> PullInfo:
        return _pull_info(self._call(f"GET pull #{number}", self._repo.get_pull, number))

    def _open_pulls(self, branch: str) -> list:
        return self._call("list pulls", lambda: list(self._repo.get_pulls(state="open", head=f"{self.owner}:{branch}")))

    def find_pull(self, branch: str, marker: str) -> PullInfo | None:
        """The open PR from `branch` whose body carries `marker` (the bot's own), if any."""
        for pr in self._open_pulls(branch):
            if pr.head.ref == branch and marker in (pr.body or ""):
                return _pull_info(pr)
        return None

    def foreign_pull(self, branch: str, marker: str) -> PullInfo | None:
        """An open PR from `branch` that is NOT the bot's (someone else owns the branch)."""
        for pr in self._open_pulls(branch):
            if pr.head.ref == branch and marker not in (pr.body or ""):
                return _pull_info(pr)
        return None

    def create_pull(self, *, base: str, branch: str, title: str, body: str, labels: list[str]) -> PullInfo:
        pr = self._call("create pull", self._repo.create_pull, base=base, head=branch, title=title, body=body)
        if labels:
            self._call("add labels", self._repo.get_issue(pr.number).add_to_labels, *labels)
        return _pull_info(pr)

    def update_pull(self, number: int, *, title: str, body: str) -> PullInfo:
        pr = self._repo.get_pull(number)
        self._call(f"update pull #{number}", pr.edit, title=title, body=body)
        return self.get_pull(number)

    # -- comments and reactions -------------------------------------------------------------------
    def upsert_comment(self, number: int, marker: str, body: str) -> CommentInfo:
        """Update the bot's comment on issue/PR `number` (found by `marker`) or create it."""
        issue = self._repo.get_issue(number)
        for comment in self._call("list comments", lambda: list(issue.get_comments())):
            if marker in (comment.body or ""):
                self._call("update comment", comment.edit, body)
                return CommentInfo(comment.id, comment.html_url, body)
        comment = self._call("create comment", issue.create_comment, body)
        return CommentInfo(comment.id, comment.html_url, comment.body)

    def react(self, number: int, comment_id: int, content: str) -> None:
        comment = self._call("read comment", self._repo.get_issue(number).get_comment, comment_id)
        self._call(f"react {content}", comment.create_reaction, content)
