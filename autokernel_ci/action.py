"""`autokernel-ci action`: the GitHub Actions entrypoint (action.yml runs it).

Reads GitHub's own variables (GITHUB_EVENT_NAME, GITHUB_EVENT_PATH, GITHUB_REPOSITORY,
GITHUB_WORKSPACE, GITHUB_OUTPUT, GITHUB_STEP_SUMMARY, GITHUB_API_URL, GITHUB_SERVER_URL) and the
inputs action.yml maps to AUTOKERNEL_INPUT_<NAME> (composite actions get no INPUT_* variables),
then dispatches on the event:

  schedule, workflow_dispatch  -> profile, optimise, publish: the one bot PR, created or updated
  issue_comment "/autokernel"  -> on a PR, by a writer: run on the PR's pinned head, answer ONE comment
  pull_request (kernels dir)   -> review: re-verify and re-benchmark changed kernels against the base
  mode: optimize / publish     -> one shard of a matrix / the merge job that publishes all shards

The token is masked, removed from the process environment before any model or kernel code runs,
and handed only to PyGithub and to git through its child environment. Comment text is parsed as
data (a whitelist of options); nothing from an event ever reaches a shell.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import re
import secrets
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from autokernel_ci.config import Config, ConfigError, load_config
from autokernel_ci.loop.interrupt import LoopInterrupted

if TYPE_CHECKING:  # for annotations only: the functions below import Git where they use it
    from autokernel_ci.publish.git import Git

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
INPUT_PREFIX = "AUTOKERNEL_INPUT_"
# action input -> Config key (None: handled by the entrypoint itself)
INPUTS: dict[str, str | None] = {
    "github-token": None, "config": None, "mode": None, "run-dirs": None,
    "agent": "agent", "llm-model": "llm_model", "llm-api-base": "llm_api_base",
    "budget-minutes": "budget_minutes", "max-experiments": "max_experiments", "max-usd": "max_usd",
    "allow-forks": "allow_forks", "kernels-dir": "kernels_dir", "branch": "branch", "base-branch": "base_branch",
    "shard": "shard", "device": "device", "model": "model", "inputs": "inputs", "example": "example",
    "top": "top", "min-speedup": "min_speedup", "run-dir": "run_dir",
}
MODES = ("auto", "run", "optimize", "publish", "review")
SECRET_NAME_RE = re.compile(r"(TOKEN|SECRET|PASSWORD|API_KEY|APIKEY|_KEY)$", re.IGNORECASE)
MIN_SECRET_LEN = 8  # masking short values ("true", "1") would blank unrelated log text
COMMAND_RE = re.compile(r"^/autokernel(?:\s+(?P<args>.*))?$")
REVIEW_ACTIONS = ("opened", "synchronize", "reopened", "ready_for_review")
# Review: a PR kernel is "slower" only when its p20 is above the base's p80 (the spreads do not
# overlap) AND its median is more than this much above the base's; run-to-run noise of a
# memory-bound kernel on one GPU is ~1-2%.
REVIEW_SLOWER_TOLERANCE = 0.03


class ActionError(RuntimeError):
    pass


# -- workflow commands ---------------------------------------------------------------------------
def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


class Workflow:
    """GitHub's workflow commands and files: masks, groups, annotations, outputs, job summary."""

    def __init__(self, env: Mapping[str, str], stream: TextIO | None = None) -> None:
        self.output_path = env.get("GITHUB_OUTPUT") or None
        self.summary_path = env.get("GITHUB_STEP_SUMMARY") or None
        self.stream = stream or sys.stdout
        self._masked: set[str] = set()

    def _print(self, line: str) -> None:
        print(line, file=self.stream, flush=True)

    def mask(self, value: str | None) -> None:
        if value and len(value) >= MIN_SECRET_LEN and value not in self._masked:
            self._masked.add(value)
            self._print(f"::add-mask::{_escape_data(value)}")

    @contextlib.contextmanager
    def group(self, title: str) -> Iterator[None]:
        self._print(f"::group::{_escape_data(title)}")
        try:
            yield
        finally:
            self._print("::endgroup::")

    def error(self, message: str, file: str | None = None, line: int | None = None) -> None:
        props = ",".join(p for p in (f"file={_escape_property(file)}" if file else "",
                                     f"line={line}" if line else "") if p)
        self._print(f"::error{' ' + props if props else ''}::{_escape_data(message)}")

    def warning(self, message: str) -> None:
        self._print(f"::warning::{_escape_data(message)}")

    def notice(self, message: str) -> None:
        self._print(f"::notice::{_escape_data(message)}")

    def log(self, message: str) -> None:
        self._print(message)

    def set_output(self, name: str, value: Any) -> None:
        text = "" if value is None else str(value)
        if not self.output_path:
            self._print(f"output {name}={text}")
            return
        delimiter = f"ghadelimiter_{secrets.token_hex(8)}"  # a value can never contain it
        with open(self.output_path, "a", encoding="utf-8") as fh:
            fh.write(f"{name}<<{delimiter}\n{text}\n{delimiter}\n")

    def summary(self, markdown: str) -> None:
        if self.summary_path:
            with open(self.summary_path, "a", encoding="utf-8") as fh:
                fh.write(markdown.rstrip() + "\n")


# -- context -------------------------------------------------------------------------------------
@dataclass
class Outcome:
    # created|updated|unchanged|none|skipped|optimized|commented|refused|reviewed|ignored|failed|cancelled
    operation: str
    message: str
    exit_code: int = EXIT_OK
    pr_url: str | None = None
    pr_number: int | None = None
    speedup: float | None = None
    report_path: str | None = None
    run_dir: str | None = None
    summary: str = ""  # markdown for the job summary
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Context:
    env: dict[str, str]
    event_name: str
    event: dict[str, Any]
    repo: str
    workspace: Path
    api_url: str
    server_url: str
    token: str | None
    inputs: dict[str, str]
    workflow: Workflow

    def input(self, name: str) -> str | None:
        return self.inputs.get(name) or None


def read_inputs(env: Mapping[str, str]) -> dict[str, str]:
    values = {}
    for name in INPUTS:
        value = env.get(INPUT_PREFIX + name.upper().replace("-", "_"), "").strip()
        if value:
            values[name] = value
    return values


def config_from_inputs(ctx: Context, extra: Mapping[str, Any] | None = None) -> Config:
    overrides = {key: ctx.inputs[name] for name, key in INPUTS.items() if key and name in ctx.inputs}
    overrides.update(extra or {})
    path = ctx.input("config")
    if path and not Path(path).is_absolute():
        path = str(ctx.workspace / path)
    return load_config(path, overrides, repo=ctx.workspace)


def mask_secrets(env: Mapping[str, str], wf: Workflow, token: str | None) -> None:
    wf.mask(token)
    for name, value in env.items():
        if SECRET_NAME_RE.search(name) and value:
            wf.mask(value)


def scrub_environment(token: str | None) -> None:
    """Drop the token from this process's environment: model code (profiling runs in-process) and
    every child (harness workers, git hooks) inherit os.environ."""
    for name in ("GITHUB_TOKEN", "GH_TOKEN", INPUT_PREFIX + "GITHUB_TOKEN", "INPUT_GITHUB-TOKEN", "INPUT_GITHUB_TOKEN"):
        os.environ.pop(name, None)
    if token:
        for name in [k for k, v in os.environ.items() if v == token]:
            os.environ.pop(name, None)


def _target(ctx: Context):
    from autokernel_ci.publish.publisher import GitHubTarget

    if not ctx.token:
        raise ActionError("no GitHub token: pass `github-token: ${{ github.token }}` (or a PAT) to the action")
    return GitHubTarget(repo=ctx.repo, token=ctx.token, api_url=ctx.api_url, server_url=ctx.server_url)


def _run_dirs(ctx: Context) -> list[Path]:
    """The `run-dirs` input: newline/comma separated paths or globs, relative to the workspace."""
    patterns = [p.strip() for p in re.split(r"[\n,]", ctx.input("run-dirs") or "") if p.strip()]
    found: list[Path] = []
    for pattern in patterns:
        base = pattern if Path(pattern).is_absolute() else str(ctx.workspace / pattern)
        matches = sorted(Path(m) for m in glob.glob(base) if (Path(m) / "settings.json").is_file())
        found.extend(m for m in matches if m not in found)
    if patterns and not found:
        raise ActionError(f"run-dirs {', '.join(patterns)} matched no run directory (a folder with settings.json); "
                          "check the download-artifact path")
    return found


def _publish_outcome(result) -> Outcome:
    from autokernel_ci.publish.report import render_markdown

    summary = render_markdown("summary.md.j2", {**result.context, "operation": result.operation,
                                                "message": result.message, "pr_url": result.pr_url})
    return Outcome(operation=result.operation, message=result.message, pr_url=result.pr_url,
                   pr_number=result.pr_number, speedup=result.speedup, report_path=result.report_path,
                   summary=summary)


# -- schedule / workflow_dispatch / mode run|publish|optimize ---------------------------------------
def handle_run(ctx: Context, *, publish_only: bool = False, optimize_only: bool = False) -> Outcome:
    from autokernel_ci.publish.publisher import publish

    config = config_from_inputs(ctx)
    run_dirs = _run_dirs(ctx)
    if publish_only and not run_dirs:
        raise ActionError("mode publish needs run-dirs: the shard run directories to merge and publish")
    if not run_dirs:
        from autokernel_ci.pipeline import run_pipeline

        with ctx.workflow.group("autokernel-ci: profile, optimise, end-to-end check"):
            result = run_pipeline(config, repo=ctx.workspace, log=ctx.workflow.log)
        run_dirs = [result.run_dir]
        if optimize_only:
            return Outcome(operation="optimized", message=f"shard {config.shard or '1/1'} done: {result.run_dir}",
                           run_dir=str(result.run_dir),
                           summary=f"## autokernel-ci: shard {config.shard or '1/1'} optimised\n\n"
                                   f"Run directory: `{result.run_dir.name}` (upload it for the merge job)\n")
    with ctx.workflow.group(f"autokernel-ci: publish {len(run_dirs)} run dir(s)"):
        result = publish(run_dirs, ctx.workspace, mode="github", config=config, github=_target(ctx))
    outcome = _publish_outcome(result)
    outcome.run_dir = str(run_dirs[0])
    if result.operation == "skipped":
        ctx.workflow.warning(result.message)
    return outcome


# -- issue_comment: /autokernel ----------------------------------------------------------------------
class _CommentParser(argparse.ArgumentParser):
    def error(self, message: str):  # never exit the process on a stranger's typo
        raise ActionError(message)


def comment_parser() -> argparse.ArgumentParser:
    p = _CommentParser(prog="/autokernel", add_help=False, exit_on_error=False,
                       description="re-run autokernel-ci on this PR's head")
    p.add_argument("command", nargs="?", choices=("run", "help"), default="run")
    p.add_argument("--budget-minutes", type=float, default=None)
    p.add_argument("--max-experiments", type=int, default=None)
    p.add_argument("--max-usd", type=float, default=None)
    p.add_argument("--top", type=int, default=None)
    p.add_argument("--agent", choices=("search", "llm"), default=None)
    return p


def parse_comment_command(body: str) -> dict[str, Any] | None:
    """None when the first line is not `/autokernel ...`; else the parsed options (raises ActionError)."""
    first = (body or "").strip().splitlines()[0].strip() if (body or "").strip() else ""
    m = COMMAND_RE.match(first)
    if not m:
        return None
    try:
        tokens = shlex.split(m.group("args") or "")
    except ValueError as exc:
        raise ActionError(f"could not read the options ({exc})") from None
    try:
        ns = comment_parser().parse_args(tokens)
    except argparse.ArgumentError as exc:
        raise ActionError(str(exc)) from None
    return {k: v for k, v in vars(ns).items() if v is not None}


def _usage() -> str:
    return ("usage: `/autokernel [--budget-minutes N] [--max-experiments N] [--max-usd X] [--top N] "
            "[--agent search|llm]`")


def handle_comment(ctx: Context) -> Outcome:
    from autokernel_ci.publish.github import GitHubClient
    from autokernel_ci.publish.report import COMMENT_MARKER, render_markdown

    ev = ctx.event
    comment, issue = ev.get("comment") or {}, ev.get("issue") or {}
    user = (comment.get("user") or {})
    login = str(user.get("login", ""))
    if ev.get("action") != "created":
        return _ignored(ctx, f"comment {ev.get('action')}, not created")
    if not issue.get("pull_request"):
        return _ignored(ctx, f"#{issue.get('number')} is an issue, not a pull request")
    if user.get("type") == "Bot" or login.endswith("[bot]"):
        return _ignored(ctx, f"comment by bot {login}")
    try:
        options = parse_comment_command(comment.get("body", ""))
        bad_options = None
    except ActionError as exc:
        options, bad_options = {}, str(exc)
    if options is None:
        return _ignored(ctx, "comment does not start with /autokernel")
    number, comment_id = int(issue["number"]), int(comment["id"])
    gh = GitHubClient(_target(ctx).token, ctx.repo, ctx.api_url)
    gh.react(number, comment_id, "eyes")

    def reply(status: str, message: str, reaction: str, *, context: dict[str, Any] | None = None,
              head_sha: str = "", exit_code: int = EXIT_OK, operation: str = "commented") -> Outcome:
        from markupsafe import Markup

        base = {"kernels": [], "e2e": None, "gpu": "", "experiments": 0, "min_speedup": 1.0, "version": ""}
        body_ctx = {**base, **(context or {}), "comment_marker": Markup(COMMENT_MARKER), "status": status,
                    "message": message, "head_sha": head_sha}
        body_ctx["version"] = body_ctx["version"] or _version()
        posted = gh.upsert_comment(number, COMMENT_MARKER, render_markdown("comment.md.j2", body_ctx))
        gh.react(number, comment_id, reaction)
        return Outcome(operation=operation, message=message, exit_code=exit_code, pr_number=number,
                       pr_url=posted.url, summary=f"## autokernel-ci: {operation}\n\n{message}\n",
                       speedup=(context or {}).get("best_kernel_speedup"))

    permission = gh.permission(login)
    if permission not in ("admin", "maintain", "write"):
        return reply("refused", f"@{login} has {permission} access; `/autokernel` needs write access to "
                     f"{ctx.repo}. A maintainer can comment it instead.", "confused", operation="refused")
    if bad_options:
        return reply("refused", f"{bad_options}. {_usage()}", "confused", operation="refused")
    if options.get("command") == "help":
        return reply("refused", _usage(), "rocket", operation="commented")
    pr = gh.get_pull(number)
    head_sha = pr.head_sha  # pinned now, at permission-check time
    config = config_from_inputs(ctx, {k: v for k, v in options.items() if k != "command"})
    if pr.head_repo != ctx.repo and not config.allow_forks:
        return reply("refused", f"the head of #{number} is in a fork ({pr.head_repo or 'deleted repository'}): "
                     "running its code on this runner is off (set allow-forks: true to allow it)", "confused",
                     operation="refused", head_sha=head_sha)
    try:
        context, message = _run_on_head(ctx, config, number, head_sha)
    except Exception as exc:  # the reply must say what happened, whatever it was
        ctx.workflow.error(f"/autokernel on #{number} failed: {exc}")
        return reply("failed", _one_line(exc), "confused", head_sha=head_sha, exit_code=EXIT_FAILED,
                     operation="failed")
    outcome = reply("done", message, "rocket", context=context, head_sha=head_sha)
    outcome.report_path = context.get("_report_path")
    return outcome


def _run_on_head(ctx: Context, config: Config, number: int, head_sha: str) -> tuple[dict[str, Any], str]:
    """Fetch the PR head (issue_comment runs on the default branch), check it is still the SHA read
    at permission time, run on a detached worktree of it, and return the report context."""
    from autokernel_ci.publish.git import Git
    from autokernel_ci.publish.publisher import preview

    git = Git(ctx.workspace, server_url=ctx.server_url, token=ctx.token)
    fetched = git.fetch(git.remote_url(ctx.repo), f"refs/pull/{number}/head")
    if fetched != head_sha:
        raise ActionError(f"the PR head moved from {head_sha[:10]} to {fetched[:10]} after the permission check; "
                          "comment /autokernel again to run on the new head")
    run_dirs = _run_dirs(ctx)
    with tempfile.TemporaryDirectory(prefix="autokernel-head-") as tmp:
        tree = Path(tmp) / "head"
        git.run("worktree", "add", "--detach", str(tree), head_sha)
        try:
            if not run_dirs:
                from autokernel_ci.pipeline import run_pipeline

                with ctx.workflow.group(f"autokernel-ci: run on #{number} at {head_sha[:10]}"):
                    run_dirs = [run_pipeline(config, repo=tree, run_dir=ctx.workspace / ".autokernel-ci" / "runs" /
                                             f"pr-{number}-{head_sha[:10]}", log=ctx.workflow.log).run_dir]
            result = preview(run_dirs, ctx.workspace, config=config)
        finally:
            git.run("worktree", "remove", "--force", str(tree), check=False)
    return {**result.context, "_report_path": result.report_path}, result.message


# -- pull_request: review mode -------------------------------------------------------------------------
def handle_review(ctx: Context) -> Outcome:
    from autokernel_ci.publish.git import Git
    from autokernel_ci.publish.report import REVIEW_MARKER, render_markdown

    ev = ctx.event
    if ev.get("action") not in REVIEW_ACTIONS:
        return _ignored(ctx, f"pull_request {ev.get('action')}: nothing to review")
    pr = ev["pull_request"]
    number, head_sha, base_sha = int(pr["number"]), pr["head"]["sha"], pr["base"]["sha"]
    fork = ((pr.get("head") or {}).get("repo") or {}).get("full_name") != ctx.repo
    token = None if fork else ctx.token  # a fork's kernels never run next to a token (§5)
    config = config_from_inputs(ctx)
    git = Git(ctx.workspace, server_url=ctx.server_url, token=token)
    for sha, ref in ((base_sha, pr["base"]["ref"]), (head_sha, f"refs/pull/{number}/head")):
        if not git.rev_parse(sha):
            git.fetch(git.remote_url(ctx.repo), ref if ref.startswith("refs/") else f"refs/heads/{ref}")
    prefix = f"{config.kernels_dir}/kernels/"
    changed = [p for p in git.changed_files(base_sha, head_sha) if p.startswith(prefix) and p.endswith(".py")]
    if not changed:
        return _ignored(ctx, f"#{number} changes nothing under {prefix}")
    rows = review_kernels(git, changed, base_sha, head_sha, device=config.device, workflow=ctx.workflow)
    failures = sum(1 for r in rows if r["verdict"] != "ok")
    body = render_markdown("review.md.j2", {
        "review_marker": _markup(REVIEW_MARKER), "ok": failures == 0, "failures": failures, "rows": rows,
        "base_ref": pr["base"]["ref"], "device": rows[0]["device"] if rows else "?",
        "tolerance_pct": round(REVIEW_SLOWER_TOLERANCE * 100)})
    url = None
    if token:
        from autokernel_ci.publish.github import GitHubClient

        url = GitHubClient(token, ctx.repo, ctx.api_url).upsert_comment(number, REVIEW_MARKER, body).url
    else:
        ctx.workflow.log("fork PR: reviewed without the token; the table is in the job summary only")
    for r in rows:
        if r["verdict"] != "ok":
            ctx.workflow.error(f"{r['verdict']}: {r['detail']}", file=r["path"])
    return Outcome(operation="reviewed", message=f"{len(rows)} kernel(s) reviewed, {failures} problem(s)",
                   exit_code=EXIT_FAILED if failures else EXIT_OK, pr_number=number, pr_url=url, summary=body)


def review_kernels(git: Git, paths: list[str], base_sha: str, head_sha: str, *, device: str | None,
                   workflow: Workflow) -> list[dict[str, Any]]:
    from autokernel_ci.harness import bench, verify

    rows = []
    with tempfile.TemporaryDirectory(prefix="autokernel-review-") as tmp:
        for path in paths:
            head_src = git.show(head_sha, path)
            if head_src is None:
                continue  # deleted by the PR: nothing to run
            head_file = Path(tmp) / "head" / Path(path).name
            head_file.parent.mkdir(parents=True, exist_ok=True)
            head_file.write_text(head_src)
            row: dict[str, Any] = {"path": path, "base_us": None, "head_us": None, "change": None, "detail": ""}
            with workflow.group(f"review {path}"):
                verdict = verify(str(head_file), device=device)
                row["device"] = verdict.device
                row["verify"] = "pass" if verdict.passed else f"{verdict.status}: {verdict.reason}"
                if not verdict.passed:
                    row.update(verdict="wrong", detail=f"{path} fails verification: {verdict.reason}")
                    rows.append(row)
                    continue
                head_t = _median(bench(str(head_file), device=device))
                row["head_us"] = head_t[0] if head_t else None
                base_src = git.show(base_sha, path)
                base_t = None
                if base_src is not None:
                    base_file = Path(tmp) / "base" / Path(path).name
                    base_file.parent.mkdir(parents=True, exist_ok=True)
                    base_file.write_text(base_src)
                    base_t = _median(bench(str(base_file), device=device))
                    row["base_us"] = base_t[0] if base_t else None
                row.update(verdict="ok", detail="")
                if head_t and base_t:
                    row["change"] = base_t[0] / head_t[0]
                    if is_slower(head_t, base_t):
                        row.update(verdict="slower", detail=f"{path}: {head_t[0]:.1f} us vs {base_t[0]:.1f} us on "
                                                             "the base branch")
            rows.append(row)
    return rows


def _median(result) -> tuple[float, float, float] | None:
    """(median, p20, p80) of a BenchResult, summed over its shapes."""
    if result is None or not result.rows:
        return None
    rows = [r.candidate for r in result.rows]
    return (sum(t.median_us for t in rows), sum(t.p20_us for t in rows), sum(t.p80_us for t in rows))


def is_slower(head: tuple[float, float, float], base: tuple[float, float, float],
              tolerance: float = REVIEW_SLOWER_TOLERANCE) -> bool:
    return head[1] > base[2] and head[0] > base[0] * (1.0 + tolerance)


# -- dispatch --------------------------------------------------------------------------------------
def _ignored(ctx: Context, why: str) -> Outcome:
    ctx.workflow.log(f"autokernel-ci: ignoring {ctx.event_name} event: {why}")
    return Outcome(operation="ignored", message=why)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:500]


def _markup(text: str):
    from markupsafe import Markup

    return Markup(text)


def _version() -> str:
    from autokernel_ci import __version__

    return __version__


def dispatch(ctx: Context) -> Outcome:
    mode = (ctx.input("mode") or "auto").lower()
    if mode not in MODES:
        raise ConfigError(f"input mode {mode!r} is not one of {', '.join(MODES)}")
    if mode == "optimize":
        return handle_run(ctx, optimize_only=True)
    if mode == "publish":
        return handle_run(ctx, publish_only=True)
    if mode == "review" or (mode == "auto" and ctx.event_name in ("pull_request", "pull_request_target")):
        if ctx.event_name == "pull_request_target":
            return _ignored(ctx, "pull_request_target would run PR code with secrets: use the pull_request event")
        return handle_review(ctx)
    if mode == "run" or ctx.event_name in ("schedule", "workflow_dispatch", "push"):
        return handle_run(ctx)
    if ctx.event_name == "issue_comment":
        return handle_comment(ctx)
    return _ignored(ctx, f"event {ctx.event_name!r} is not handled (schedule, workflow_dispatch, issue_comment, "
                         "pull_request)")


def build_context(env: Mapping[str, str], stream: TextIO | None = None) -> Context:
    wf = Workflow(env, stream)
    inputs = read_inputs(env)
    token = inputs.get("github-token") or env.get("GITHUB_TOKEN") or None
    mask_secrets(env, wf, token)
    event_name = env.get("GITHUB_EVENT_NAME", "")
    event_path = env.get("GITHUB_EVENT_PATH", "")
    if not event_name or not event_path:
        raise ActionError("GITHUB_EVENT_NAME / GITHUB_EVENT_PATH are not set: `autokernel-ci action` runs inside "
                          "GitHub Actions (use `autokernel-ci run` elsewhere)")
    try:
        event = json.loads(Path(event_path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ActionError(f"cannot read the event payload {event_path}: {exc}") from None
    repo = env.get("GITHUB_REPOSITORY") or (event.get("repository") or {}).get("full_name", "")
    return Context(env=dict(env), event_name=event_name, event=event, repo=repo,
                   workspace=Path(env.get("GITHUB_WORKSPACE") or os.getcwd()).resolve(),
                   api_url=(env.get("GITHUB_API_URL") or "https://api.github.com").rstrip("/"),
                   server_url=(env.get("GITHUB_SERVER_URL") or "https://github.com").rstrip("/"),
                   token=token, inputs=inputs, workflow=wf)


def write_outcome(ctx: Context, outcome: Outcome) -> None:
    wf = ctx.workflow
    for name, value in (("operation", outcome.operation), ("pr-url", outcome.pr_url),
                        ("pr-number", outcome.pr_number),
                        ("speedup", f"{outcome.speedup:.4f}" if outcome.speedup else ""),
                        ("report-path", outcome.report_path), ("run-dir", outcome.run_dir)):
        wf.set_output(name, value)
    wf.summary(outcome.summary or f"## autokernel-ci: {outcome.operation}\n\n{outcome.message}\n")
    wf.log(f"autokernel-ci: {outcome.operation}: {outcome.message}")


def action_main(args: argparse.Namespace | None = None, env: Mapping[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    try:
        ctx = build_context(env)
    except ActionError as exc:
        Workflow(env).error(str(exc))
        return EXIT_USAGE
    scrub_environment(ctx.token)
    from autokernel_ci.publish.git import GitError
    from autokernel_ci.publish.github import GitHubError
    from autokernel_ci.publish.merge import RunDirError
    from autokernel_ci.publish.publisher import PublishError

    try:
        outcome = dispatch(ctx)
    except (ConfigError, RunDirError) as exc:
        ctx.workflow.error(str(exc), file=ctx.input("config"))
        outcome = Outcome(operation="failed", message=str(exc), exit_code=EXIT_USAGE)
    except (ActionError, PublishError, GitHubError, GitError, subprocess.SubprocessError) as exc:
        ctx.workflow.error(_one_line(exc))
        outcome = Outcome(operation="failed", message=_one_line(exc), exit_code=EXIT_FAILED)
    except LoopInterrupted as exc:  # the workflow was cancelled (the runner's SIGINT, then SIGTERM 7.5 s later)
        message = exc.describe("nothing was published")
        ctx.workflow.error(message)
        outcome = Outcome(operation="cancelled", message=message, run_dir=str(exc.run_dir), exit_code=exc.exit_code)
    write_outcome(ctx, outcome)
    return outcome.exit_code
