"""Local mode needs no PyGithub: a runner without it (or with a broken one) still publishes locally."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
sys.modules["github"] = None  # `import github` now raises ImportError, as if PyGithub were absent
from autokernel_ci.publish import publish, preview  # noqa: F401
from autokernel_ci.publish.github import GitHubClient, GitHubError
try:
    GitHubClient("t0ken", "owner/name", api_url="http://127.0.0.1:9")
except GitHubError as exc:
    print(exc)
"""


def test_publish_imports_without_pygithub_and_github_mode_says_it_needs_it():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "GitHub mode needs PyGithub" in out.stdout and "pip install 'PyGithub>=2.1'" in out.stdout
