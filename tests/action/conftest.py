"""The action tests share the publish tests' servers and run-directory builder (tests/publish/ghworld.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "publish"))

from ghworld import model_repo, world  # noqa: E402,F401  (fixtures)
