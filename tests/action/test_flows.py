"""The action end to end: the real entrypoint (`python -m autokernel_ci action`, a subprocess) against
a bare repository served over git's smart HTTP protocol and a GitHub REST API on 127.0.0.1.

The optimisation itself is replaced by run directories prepared on disk (the `run-dirs` input the
matrix merge job uses), so every test exercises dispatch, git, the API and the reports for real.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ghworld import REPO, TOKEN, files_containing, git
from rundirs import make_run_dir, plan_op

from autokernel_ci.action import action_main
from autokernel_ci.publish.report import COMMENT_MARKER, PR_MARKER

FIXTURES = Path("/work/shared/fixtures/github-events")
if not FIXTURES.is_dir():
    FIXTURES = Path(__file__).resolve().parents[2].parent / "shared" / "fixtures" / "github-events"
BRANCH = "autokernel/nightly"


def run_action(world, event_name: str, payload: dict, *, subprocess_run: bool = False,
               **inputs: str) -> tuple[int, str]:
    """Run the entrypoint: as a real `python -m autokernel_ci action` process, or (faster: no
    torch import per call) as action_main in this process with os.environ swapped for the runner's."""
    event_path = world.tmp / f"event-{event_name}-{len(world.api.requests)}-{len(world.api.comments)}.json"
    event_path.write_text(json.dumps(payload))
    env = world.env(event_name, event_path, **inputs)
    if subprocess_run:
        proc = subprocess.run([sys.executable, "-m", "autokernel_ci", "action"], cwd=world.workspace, env=env,
                              capture_output=True, text=True, timeout=300)
        code, log = proc.returncode, proc.stdout + proc.stderr
    else:
        saved, cwd, out = dict(os.environ), os.getcwd(), io.StringIO()
        os.environ.clear()
        os.environ.update(env)
        os.chdir(world.workspace)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                code = action_main(None)
        finally:
            os.environ.clear()
            os.environ.update(saved)
            os.chdir(cwd)
        log = out.getvalue()
    with (world.tmp / "logs.txt").open("a") as fh:
        fh.write(log)
    return code, log


def schedule_payload() -> dict:
    return {"schedule": "0 3 * * *", "repository": {"full_name": REPO}}


def run_dir(world, name: str, speedups: dict, **kw) -> Path:
    ops = [plan_op("rmsnorm-0", "rmsnorm", 0.3, ["model.layers.0.norm"]), plan_op("softmax-0", "softmax", 0.1)]
    return make_run_dir(world.tmp / "runs" / name, ops, speedups=speedups, **kw)


def comment_payload(body: str, *, login: str = "writer", number: int = 7, action: str = "created",
                    on_pr: bool = True, user_type: str = "User") -> dict:
    payload = copy.deepcopy(json.loads((FIXTURES / f"issue_comment.{action}.json").read_text()))
    payload["action"] = action
    payload["repository"]["full_name"] = REPO
    payload["issue"]["number"] = number
    if on_pr:
        payload["issue"]["pull_request"] = {"url": f"https://api.example/repos/{REPO}/pulls/{number}",
                                            "html_url": "", "diff_url": "", "patch_url": "", "merged_at": None}
    payload["comment"]["body"] = body
    payload["comment"]["user"]["login"] = login
    payload["comment"]["user"]["type"] = user_type
    return payload


def assert_token_hidden(world, log: str) -> None:
    # the one place it may appear: the ::add-mask:: command, which tells the runner to hide it
    assert log.count(f"::add-mask::{TOKEN}") <= 2
    assert TOKEN not in log.replace(f"::add-mask::{TOKEN}", "")
    assert TOKEN not in (world.workspace / ".git" / "config").read_text()
    assert files_containing(world.workspace, TOKEN) == []
    assert files_containing(world.bare, TOKEN) == []
    for req in world.gitserver.requests:
        assert TOKEN not in req["path"]


def test_nightly_creates_then_updates_one_pr(world):
    first = run_dir(world, "night1", {"rmsnorm-0": [1.5]})
    code, log = run_action(world, "schedule", schedule_payload(), run_dirs=str(first), subprocess_run=True)
    assert code == 0, log
    out = world.outputs()
    assert out["operation"] == "created" and out["pr-number"] == "1", out
    tip1 = world.remote_sha(f"refs/heads/{BRANCH}")
    assert tip1 and git(world.bare, "log", "-1", "--format=%an", tip1) == "autokernel-ci[bot]"
    files = git(world.bare, "ls-tree", "-r", "--name-only", tip1).splitlines()
    assert "autokernels/kernels/rmsnorm-0.py" in files and "autokernels/report/speedup.png" in files
    assert "autokernels/kernels/softmax-0.py" not in files  # 0.8x eager: not published
    [pr] = world.api.open_pulls()
    assert PR_MARKER in pr["body"] and f"autokernel-ci:head={tip1}" in pr["body"]
    assert f"{world.gitserver.url}/{REPO}/blob/{BRANCH}/autokernels/report/progress.png?raw=true" in pr["body"]
    assert "## autokernel-ci: created" in (world.tmp / "summary.md").read_text()
    assert "::add-mask::" in log and "::group::" in log

    (world.tmp / "github_output").unlink()
    second = run_dir(world, "night2", {"rmsnorm-0": [1.5, 2.5], "softmax-0": [1.2]})
    code, log2 = run_action(world, "schedule", schedule_payload(), run_dirs=str(second))
    assert code == 0, log2
    out = world.outputs()
    assert out["operation"] == "updated" and out["pr-number"] == "1", out
    assert float(out["speedup"]) == pytest.approx(2.5)
    assert len(world.api.pulls) == 1  # updated, never a duplicate
    tip2 = world.remote_sha(f"refs/heads/{BRANCH}")
    assert tip2 != tip1 and f"autokernel-ci:head={tip2}" in world.api.pulls[0]["body"]
    assert "softmax-0" in world.api.pulls[0]["body"]
    assert [r for r in world.api.errors] == []  # every request was well formed
    assert world.gitserver.requests and all(r["auth"] for r in world.gitserver.requests
                                            if r["method"] == "POST")
    assert_token_hidden(world, log + log2)

    # same results again: nothing to push, the PR stays as it is
    code, log3 = run_action(world, "workflow_dispatch", {"inputs": {}, "repository": {"full_name": REPO}},
                            run_dirs=str(second))
    assert code == 0 and world.outputs()["operation"] == "unchanged", log3
    assert world.remote_sha(f"refs/heads/{BRANCH}") == tip2 and len(world.api.pulls) == 1


def test_no_improvement_and_no_diff_make_no_pr(world):
    slow = run_dir(world, "slow", {"rmsnorm-0": [0.95]})
    code, log = run_action(world, "schedule", schedule_payload(), run_dirs=str(slow))
    assert code == 0, log
    assert world.outputs()["operation"] == "none" and "nothing to publish" in log
    assert world.api.pulls == [] and world.remote_sha(f"refs/heads/{BRANCH}") is None

    # the team merged these kernels already: publishing them again is no diff
    fast = run_dir(world, "fast", {"rmsnorm-0": [1.5]})
    code, log = run_action(world, "schedule", schedule_payload(), run_dirs=str(fast))
    assert world.outputs()["operation"] == "created", log
    tip = world.remote_sha(f"refs/heads/{BRANCH}")
    git(world.bare, "update-ref", "refs/heads/main", tip)  # merged (fast-forward)
    world.api.pulls[0]["state"] = "closed"
    git(world.workspace, "fetch", "-q", str(world.bare), "main")
    git(world.workspace, "reset", "-q", "--hard", "FETCH_HEAD")
    code, log = run_action(world, "schedule", schedule_payload(), run_dirs=str(fast))
    assert code == 0 and world.outputs()["operation"] == "none" and "no diff" in log, log
    assert len(world.api.pulls) == 1


def test_human_commit_on_bot_branch_is_never_overwritten(world):
    code, log = run_action(world, "schedule", schedule_payload(),
                           run_dirs=str(run_dir(world, "n1", {"rmsnorm-0": [1.5]})))
    assert code == 0, log
    # a reviewer pushes a fix onto the bot branch
    clone = world.tmp / "human"
    subprocess.run(["git", "clone", "-q", "-b", BRANCH, str(world.bare), str(clone)], check=True)
    (clone / "autokernels" / "NOTE.md").write_text("tuned by hand\n")
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "human tweak")
    git(clone, "push", "-q", "origin", BRANCH)
    human_tip = world.remote_sha(f"refs/heads/{BRANCH}")

    code, log = run_action(world, "schedule", schedule_payload(),
                           run_dirs=str(run_dir(world, "n2", {"rmsnorm-0": [1.5, 3.0]})))
    assert code == 0, log
    assert world.outputs()["operation"] == "skipped"
    assert "Ada Human" in log and "::warning::" in log
    assert world.remote_sha(f"refs/heads/{BRANCH}") == human_tip  # no force push
    assert "3.00x" not in world.api.pulls[0]["body"]


def test_comment_from_read_only_user_gets_a_polite_reply(world):
    world.api.add_pull(number=7, head_ref="feature", head_sha="a" * 40, head_repo=REPO)
    world.api.permissions["reader"] = "read"
    c = world.api.add_comment(7, "/autokernel --max-experiments 3", login="reader")
    payload = comment_payload("/autokernel --max-experiments 3", login="reader")
    payload["comment"]["id"] = c["id"]
    code, log = run_action(world, "issue_comment", payload)
    assert code == 0, log
    replies = world.api.bot_comments(COMMENT_MARKER)
    assert len(replies) == 1 and "needs write access" in replies[0]["body"]
    assert "\\@reader" in replies[0]["body"]  # named, escaped: no @mention notification
    assert [r["content"] for r in world.api.reactions] == ["eyes", "confused"]
    assert world.outputs()["operation"] == "refused"
    assert not any(r["method"] == "POST" for r in world.gitserver.requests)  # nothing fetched or pushed


def test_fork_head_is_refused(world):
    world.api.add_pull(number=7, head_ref="evil", head_sha="b" * 40, head_repo="mallory/model")
    world.api.permissions["writer"] = "write"
    c = world.api.add_comment(7, "/autokernel", login="writer")
    payload = comment_payload("/autokernel")
    payload["comment"]["id"] = c["id"]
    code, log = run_action(world, "issue_comment", payload)
    assert code == 0, log
    [reply] = world.api.bot_comments(COMMENT_MARKER)
    assert "fork" in reply["body"] and "allow-forks" in reply["body"]
    assert world.gitserver.requests == []  # the fork's head was never fetched


def test_comment_by_writer_runs_on_pinned_head_and_updates_one_comment(world):
    # the PR's head lives at refs/pull/7/head on the remote, as on GitHub
    git(world.workspace, "checkout", "-q", "-b", "feature")
    (world.workspace / "model.py").write_text("# faster model\n")
    git(world.workspace, "commit", "-q", "-am", "feature work")
    head = git(world.workspace, "rev-parse", "HEAD")
    git(world.workspace, "push", "-q", str(world.bare), "HEAD:refs/pull/7/head")
    git(world.workspace, "checkout", "-q", "main")
    git(world.workspace, "branch", "-q", "-D", "feature")
    world.api.add_pull(number=7, head_ref="feature", head_sha=head, head_repo=REPO)
    world.api.permissions["writer"] = "maintain"
    rd = run_dir(world, "pr7", {"rmsnorm-0": [1.7]})
    for text in ("/autokernel --max-experiments 2\nplease", "/autokernel"):
        c = world.api.add_comment(7, text, login="writer")
        payload = comment_payload(text)
        payload["comment"]["id"] = c["id"]
        code, log = run_action(world, "issue_comment", payload, run_dirs=str(rd))
        assert code == 0, log
    [reply] = world.api.bot_comments(COMMENT_MARKER)  # one comment, updated by the second run
    assert head[:12] in reply["body"] and "1.70x" in reply["body"]
    assert [r["content"] for r in world.api.reactions] == ["eyes", "rocket", "eyes", "rocket"]
    assert world.outputs()["operation"] == "commented"
    assert not (world.workspace.parent / "head").exists()
    assert git(world.workspace, "worktree", "list").count("\n") == 0  # the head's worktree is gone
    assert_token_hidden(world, log)


def test_comment_head_moved_after_check_is_refused(world):
    git(world.workspace, "push", "-q", str(world.bare), "main:refs/pull/7/head")
    world.api.add_pull(number=7, head_ref="feature", head_sha="c" * 40, head_repo=REPO)  # API says another SHA
    world.api.permissions["writer"] = "admin"
    c = world.api.add_comment(7, "/autokernel", login="writer")
    payload = comment_payload("/autokernel")
    payload["comment"]["id"] = c["id"]
    code, log = run_action(world, "issue_comment", payload, run_dirs=str(run_dir(world, "x", {"rmsnorm-0": [2.0]})))
    assert code == 1
    [reply] = world.api.bot_comments(COMMENT_MARKER)
    assert "moved" in reply["body"] and world.api.reactions[-1]["content"] == "confused"


@pytest.mark.parametrize("case", ["edited", "issue_not_pr", "bot", "other_text", "bad_options"])
def test_other_comments_are_ignored_or_answered_with_usage(world, case):
    world.api.permissions["writer"] = "write"
    world.api.add_pull(number=7, head_ref="feature", head_sha="d" * 40, head_repo=REPO)
    c = world.api.add_comment(7, "x", login="writer")
    kwargs = {"edited": dict(action="edited"), "issue_not_pr": dict(on_pr=False),
              "bot": dict(login="dependabot[bot]", user_type="Bot"), "other_text": {}, "bad_options": {}}[case]
    body = {"other_text": "LGTM, maybe /autokernel later", "bad_options": "/autokernel --budget-minutes lots; rm -rf /"}
    payload = comment_payload(body.get(case, "/autokernel"), **kwargs)
    payload["comment"]["id"] = c["id"]
    code, log = run_action(world, "issue_comment", payload)
    assert code == 0, log
    if case == "bad_options":
        [reply] = world.api.bot_comments(COMMENT_MARKER)
        assert "usage" in reply["body"] and world.outputs()["operation"] == "refused"
    else:
        assert world.outputs()["operation"] == "ignored" and "ignoring issue_comment" in log
        assert world.api.requests == []  # not a single API call


def test_fake_api_rejects_malformed_requests(world):
    import urllib.error
    import urllib.request

    def call(method, path, body=None, auth=True):
        req = urllib.request.Request(world.api.url + path, method=method, data=body,
                                     headers={"Authorization": f"token {TOKEN}"} if auth else {})
        try:
            with urllib.request.urlopen(req) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    assert call("GET", f"/repos/{REPO}", auth=False) == (401, {"message": "Requires authentication",
                                                              "documentation_url": "https://docs.github.com/rest",
                                                              "status": "401"})
    assert call("DELETE", f"/repos/{REPO}/pulls")[0] == 404
    assert call("POST", f"/repos/{REPO}/pulls", b"{not json")[1]["message"] == "Problems parsing JSON"
    status, body = call("POST", f"/repos/{REPO}/pulls", json.dumps({"title": "t"}).encode())
    assert status == 422 and {e["field"] for e in body["errors"]} == {"head", "base"}


def test_env_without_event_is_a_usage_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    proc = subprocess.run([sys.executable, "-m", "autokernel_ci", "action"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "::error::GITHUB_EVENT_NAME" in proc.stdout
