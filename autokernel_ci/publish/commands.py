"""`autokernel-ci publish RUN_DIR... [--local | --github]`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from typing import TextIO

from autokernel_ci.config import ConfigError, load_config
from autokernel_ci.publish.github import DEFAULT_API_URL, GitHubError
from autokernel_ci.publish.merge import RunDirError
from autokernel_ci.publish.publisher import GitHubTarget, PublishError, PublishResult, publish

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DEFAULT_SERVER_URL = "https://github.com"


def target_from_env(env: Mapping[str, str], token: str | None = None) -> GitHubTarget:
    """Where GitHub is, from the runner's own variables (github.com and Enterprise Server alike)."""
    repo = env.get("GITHUB_REPOSITORY", "")
    token = token or env.get("GITHUB_TOKEN", "")
    if not repo:
        raise PublishError("GITHUB_REPOSITORY is not set: --github runs inside GitHub Actions "
                           "(or set GITHUB_REPOSITORY=owner/name and GITHUB_TOKEN)")
    if not token:
        raise PublishError("no GitHub token: set GITHUB_TOKEN (workflow: `github-token: ${{ github.token }}`)")
    return GitHubTarget(repo=repo, token=token, api_url=env.get("GITHUB_API_URL") or DEFAULT_API_URL,
                        server_url=env.get("GITHUB_SERVER_URL") or DEFAULT_SERVER_URL)


def render_result(result: PublishResult, stream: TextIO | None = None) -> None:
    """The one renderer of a publish result for people (the action adds outputs and a summary)."""
    stream = stream or sys.stdout
    print(f"publish ({result.mode}): {result.operation}: {result.message}", file=stream)
    if result.pr_url:
        print(f"  pull request: {result.pr_url}", file=stream)
    if result.report_path:
        print(f"  report: {result.report_path}", file=stream)


def publish_main(args: argparse.Namespace) -> int:
    mode = "github" if getattr(args, "github", False) else "local"
    try:
        config = load_config(getattr(args, "config", None), repo=args.repo)
        target = target_from_env(os.environ) if mode == "github" else None
        result = publish(args.run_dirs, args.repo, mode=mode, config=config, github=target)
    except (ConfigError, RunDirError) as exc:
        print(f"autokernel-ci publish: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (PublishError, GitHubError) as exc:
        print(f"autokernel-ci publish: {exc}", file=sys.stderr)
        return EXIT_FAILED
    render_result(result)
    if getattr(args, "json", None):
        with open(args.json, "w") as fh:
            json.dump(result.to_dict(), fh, indent=2)
    return EXIT_OK
