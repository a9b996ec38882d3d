"""Publication: repo writer, git, GitHub, reports (docs/artifacts.md §3, DESIGN.md §8)."""

from autokernel_ci.publish.merge import MergedRun, merge_run_dirs
from autokernel_ci.publish.publisher import GitHubTarget, PublishError, PublishResult, preview, publish

__all__ = ["GitHubTarget", "MergedRun", "PublishError", "PublishResult", "merge_run_dirs", "preview", "publish"]
