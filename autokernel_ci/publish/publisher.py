"""publish(run_dirs, repo, mode, config): the publication onto the bot branch, and the PR.

Rules (DESIGN.md §8): one stable bot branch and ONE PR kept up to date (found by head branch and a
hidden marker); no improvement or no diff -> no PR, and say so; a bot branch carrying commits the
bot did not make is never overwritten (skip, say so). Local mode makes the same commit on a local
branch with plumbing, touching neither the working tree nor the index, and needs no network.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autokernel_ci.config import Config
from autokernel_ci.publish.git import TRAILER, CommitInfo, Git, GitError, Identity
from autokernel_ci.publish.github import GitHubClient
from autokernel_ci.publish.merge import improvements, merge_run_dirs
from autokernel_ci.publish.repo_writer import Publication, stage
from autokernel_ci.publish.report import HEAD_MARKER_RE, PR_MARKER, Links, render_markdown

WORK_DIR = ".autokernel-ci"  # inside the repository, ignored by a `*` .gitignore of its own
RECORD_REF = "refs/autokernel-ci/"  # local mode: the last commit the bot made on each bot branch
PR_BODY_FILE = "pr_body.md"  # under .autokernel-ci/publication: the PR text, for local mode and previews

OPERATIONS = ("created", "updated", "unchanged", "none", "skipped")


class PublishError(RuntimeError):
    pass


@dataclass
class GitHubTarget:
    repo: str  # owner/name
    token: str
    api_url: str
    server_url: str


@dataclass
class PublishResult:
    operation: str  # created | updated | unchanged | none | skipped
    message: str
    mode: str
    branch: str
    report_path: str | None = None
    pr_url: str | None = None
    pr_number: int | None = None
    commit: str | None = None
    speedup: float | None = None  # end to end when measured, else the best kernel's vs eager
    kernels: list[str] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "context"}


def work_dir(repo: Path) -> Path:
    d = repo / WORK_DIR
    d.mkdir(parents=True, exist_ok=True)
    ignore = d / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# autokernel-ci run directories and staged publications\n*\n")
    return d


def foreign_commits(commits: list[CommitInfo], bot: Identity, recorded: set[str] | None) -> list[CommitInfo]:
    """Commits on the bot branch the bot did not make: wrong author/committer or no trailer, or
    (when the bot recorded its heads) a commit outside that record."""
    return [c for c in commits if not c.made_by(bot) or (recorded is not None and c.sha not in recorded)]


def _describe(commits: list[CommitInfo]) -> str:
    return ", ".join(f"{c.sha[:10]} by {c.author.name} <{c.author.email}>" for c in commits[:5])


def _subtree(git: Git, commit_or_tree: str, prefix: str) -> str | None:
    out = git.run("rev-parse", "-q", "--verify", f"{commit_or_tree}:{prefix}", check=False).strip()
    return out or None


def commit_message(published: list[Any], run_id: str) -> str:
    lines = [f"autokernel-ci: {len(published)} verified kernel{'s' if len(published) != 1 else ''}", ""]
    for k in published:
        lines.append(f"- {k.op_id} ({k.kernel_type}, {k.backend}): {k.speedup_vs_eager:.2f}x vs eager on {k.gpu}")
    return "\n".join(lines) + f"\n\n{TRAILER}: {run_id}\n"


def pr_title(published: list[Any], speedup: float | None) -> str:
    n = len(published)
    head = f"autokernel-ci: {n} faster kernel{'s' if n != 1 else ''}"
    return f"{head} (up to {speedup:.2f}x)" if speedup else head


def _prepare(run_dirs: list[str | Path], repo: Path, config: Config, mode: str, links: Links,
             repo_name: str | None) -> tuple[PublishResult, Publication, list[Any], Any]:
    """Merge the run directories and stage the publication under .autokernel-ci/publication."""
    merged = merge_run_dirs([Path(r) for r in run_dirs])
    published = improvements(merged, config.min_speedup)
    staging = work_dir(repo) / "publication"
    pub = stage(staging, merged, published, repo=repo_name, branch=config.branch, kernels_dir=config.kernels_dir,
                links=links, min_speedup=config.min_speedup, repo_root=repo)
    e2e = pub.context.get("e2e") or {}
    speedup = e2e.get("speedup") or pub.context.get("best_kernel_speedup")
    result = PublishResult(operation="none", message="", mode=mode, branch=config.branch,
                           report_path=str(pub.report_path), speedup=speedup, kernels=[k.op_id for k in published],
                           context=pub.context)
    if not published:
        tried = f"{merged.experiments} experiments on {len(merged.kernels) + len(merged.others)} ops"
        result.message = (f"no verified kernel beat eager by more than {config.min_speedup:.2f}x ({tried}): "
                          f"nothing to publish; report at {pub.report_path}")
    else:
        result.message = f"{len(published)} kernel(s) ready; report at {pub.report_path}"
        # What the pull request will say, beside (not inside) the committed directory: local mode and
        # previews show it without a network; github mode renders it again with the head marker.
        (staging / PR_BODY_FILE).write_text(render_markdown("pr_body.md.j2", {**pub.context, "head_marker": ""}))
    return result, pub, published, merged


def preview(run_dirs: list[str | Path], repo: str | Path = ".", *, config: Config | None = None,
            links: Links | None = None, repo_name: str | None = None) -> PublishResult:
    """Stage the publication and report on disk only: no branch, no network (comment replies use it)."""
    config = config or Config()
    return _prepare(run_dirs, Path(repo).resolve(), config, "preview", links or Links(), repo_name)[0]


def publish(run_dirs: list[str | Path], repo: str | Path = ".", *, mode: str = "local", config: Config | None = None,
            github: GitHubTarget | None = None, base_sha: str | None = None) -> PublishResult:
    if mode not in ("local", "github"):
        raise PublishError(f"mode {mode!r} is not local or github")
    if mode == "github" and github is None:
        raise PublishError("github mode needs the repository, token, API and server URLs (GitHubTarget)")
    config = config or Config()
    repo = Path(repo).resolve()
    git = Git(repo, server_url=github.server_url if github else None, token=github.token if github else None)
    if not git.is_repo():
        raise PublishError(f"{repo} is not a git repository: run inside the model's repository or pass --repo")
    links = Links(github.server_url, github.repo, config.branch) if github else Links()
    result, pub, published, merged = _prepare(run_dirs, repo, config, mode, links, github.repo if github else None)
    kd = config.kernels_dir
    if not published:
        return result
    base = base_sha or git.rev_parse("HEAD")
    if not base:
        raise PublishError(f"{repo} has no commit to build on: commit something first")
    tree = git.build_tree(base, kd, pub.root)
    if _subtree(git, tree, f"{kd}/kernels") == _subtree(git, base, f"{kd}/kernels"):
        result.message = f"no diff: {base[:10]} already holds these kernels in {kd}/kernels; no PR"
        return result
    run_id = "+".join(sorted(Path(s.run_dir).name for s in merged.shards))
    message = commit_message(published, run_id)
    bot = Identity(config.bot_name, config.bot_email)
    if mode == "local":
        return _local(git, result, pub, tree, base, message, bot, kd)
    return _github(git, result, pub, tree, base, message, bot, kd, github, config, published)


def _local(git: Git, result: PublishResult, pub: Publication, tree: str, base: str, message: str, bot: Identity,
           kd: str) -> PublishResult:
    branch = result.branch
    ref, record = f"refs/heads/{branch}", f"{RECORD_REF}{branch}"
    if git.current_branch_ref() == ref:
        result.operation = "skipped"
        result.message = f"{branch} is checked out here: switch to another branch so the bot can update it"
        return result
    old = git.rev_parse(ref)
    if old:
        recorded = git.rev_parse(record)
        foreign = foreign_commits(git.commits(old, base), bot, {recorded} if recorded else None)
        if foreign:
            result.operation = "skipped"
            result.message = (f"local branch {branch} carries commits the bot did not make ({_describe(foreign)}); "
                              f"left untouched. Delete or rename it to let the bot publish")
            return result
        if _subtree(git, old, kd) == _subtree(git, tree, kd):
            result.operation, result.commit = "unchanged", old
            result.message = f"local branch {branch} already holds this publication ({old[:10]})"
            return result
    commit = git.commit_tree(tree, [base], message, bot)
    git.update_ref(ref, commit, old)
    git.update_ref(record, commit, git.rev_parse(record))
    result.operation, result.commit = ("updated" if old else "created"), commit
    result.message = (f"committed {len(result.kernels)} kernel(s) on local branch {branch} ({commit[:10]}); "
                      f"your working tree is untouched. Report: {pub.report_path}. "
                      f"See it with `git show --stat {branch}`")
    return result


def _github(git: Git, result: PublishResult, pub: Publication, tree: str, base: str, message: str, bot: Identity,
            kd: str, target: GitHubTarget, config: Config, published: list[Any]) -> PublishResult:
    branch = result.branch
    gh = GitHubClient(target.token, target.repo, target.api_url)
    url = git.remote_url(target.repo)
    pr = gh.find_pull(branch, PR_MARKER)
    if pr is None:
        other = gh.foreign_pull(branch, PR_MARKER)
        if other is not None:
            result.operation = "skipped"
            result.message = (f"PR #{other.number} from {branch} was not opened by the bot; not touching it. "
                              f"Set another `branch:` in the config")
            return result
    remote_old = git.ls_remote(url, f"refs/heads/{branch}")
    if remote_old:
        git.fetch(url, f"refs/heads/{branch}")
        recorded = {m.group(1) for m in HEAD_MARKER_RE.finditer(pr.body)} if pr else None
        foreign = foreign_commits(git.commits(remote_old, base), bot, recorded or None)
        if foreign:
            result.operation = "skipped"
            result.message = (f"branch {branch} carries commits the bot did not make ({_describe(foreign)}); "
                              "not force-pushing over them. Merge or move them, then re-run")
            if pr:
                result.pr_url, result.pr_number = pr.url, pr.number
            return result
        if _subtree(git, remote_old, kd) == _subtree(git, tree, kd):
            result.commit = remote_old
            if pr:
                result.operation, result.pr_url, result.pr_number = "unchanged", pr.url, pr.number
                result.message = f"PR #{pr.number} already holds this publication; nothing pushed"
            else:
                result.operation = "none"
                result.message = (f"branch {branch} already holds this publication and has no open PR "
                                  "(closed by a reviewer?): not reopening")
            return result
    commit = git.commit_tree(tree, [base], message, bot)
    try:
        git.push(url, commit, branch, remote_old)
    except GitError as exc:
        raise PublishError(f"push to {branch} failed: {exc}") from None
    context = {**pub.context, "head_marker": _head_marker(commit)}
    body = render_markdown("pr_body.md.j2", context)
    title = pr_title(published, result.speedup)
    if pr:
        info = gh.update_pull(pr.number, title=title, body=body)
        result.operation = "updated"
    else:
        base_branch = config.base_branch or gh.default_branch()
        info = gh.create_pull(base=base_branch, branch=branch, title=title, body=body, labels=config.labels)
        result.operation = "created"
    result.commit, result.pr_url, result.pr_number = commit, info.url, info.number
    result.message = f"{result.operation} PR #{info.number} ({info.url}) with {len(published)} kernel(s)"
    result.context = context
    return result


def _head_marker(commit: str) -> Any:
    from markupsafe import Markup

    return Markup(f"<!-- autokernel-ci:head={commit} -->")
